package reconcile

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

const ringSize = 251

// memMaps is an in-memory Maps for the unprivileged tests; it counts every write.
type memMaps struct {
	vips     map[maps.VIPKey]maps.VIP
	backends map[uint32]netip.Addr
	ring     []uint32 // the ring maps' slots (RingSlots)
	prev     []uint32
	writes   int
	// ringWritesAt counts the ring slots written per range offset (ringWrites gives them per VIP
	// id); maxV and maxB override the sizes, slots the ring space.
	ringWritesAt map[uint32]int
	maxV, maxB   uint32
	slots        uint32
}

func newMem() *memMaps {
	return &memMaps{vips: map[maps.VIPKey]maps.VIP{}, backends: map[uint32]netip.Addr{}}
}

func (m *memMaps) RingSize() uint32 { return ringSize }
func (m *memMaps) RingSlots() uint32 {
	if m.slots != 0 {
		return m.slots
	}
	return 2 * m.MaxVIPs() * ringSize
}
func (m *memMaps) MaxVIPs() uint32 {
	if m.maxV != 0 {
		return m.maxV
	}
	return 8
}
func (m *memMaps) MaxBackends() uint32 {
	if m.maxB != 0 {
		return m.maxB
	}
	return 64
}
func (m *memMaps) VIPs() ([]maps.VIP, error) {
	var out []maps.VIP
	for _, v := range m.vips {
		out = append(out, v)
	}
	return out, nil
}
func (m *memMaps) PutVIP(v maps.VIP) error         { m.vips[v.Key] = v; m.writes++; return nil }
func (m *memMaps) DeleteVIP(k maps.VIPKey) error   { delete(m.vips, k); m.writes++; return nil }
func (m *memMaps) PutBackend(b maps.Backend) error { m.backends[b.ID] = b.Addr; m.writes++; return nil }
func (m *memMaps) DeleteBackend(id uint32) error   { delete(m.backends, id); m.writes++; return nil }
func (m *memMaps) Backends() ([]maps.Backend, error) {
	var out []maps.Backend
	for id, a := range m.backends {
		out = append(out, maps.Backend{ID: id, Addr: a})
	}
	return out, nil
}

// rangeOf is the ring range of the VIP of an id in the vips map (false: no such VIP).
func (m *memMaps) rangeOf(id uint32) (maps.RingRange, bool) {
	for _, v := range m.vips {
		if v.ID == id {
			return v.Ring, true
		}
	}
	return maps.RingRange{}, false
}

// Ring is the ring of a VIP id (all zeros, of the default size, when it has none).
func (m *memMaps) Ring(id uint32) ([]uint32, error) {
	if rg, ok := m.rangeOf(id); ok {
		return m.RingAt(rg)
	}
	return make([]uint32, ringSize), nil
}

// PrevRing is the previous ring of a VIP id, as Ring.
func (m *memMaps) PrevRing(id uint32) ([]uint32, error) {
	if rg, ok := m.rangeOf(id); ok {
		return m.PrevRingAt(rg)
	}
	return make([]uint32, ringSize), nil
}

// ringWrites is ringWritesAt by VIP id (of the VIP whose range starts there now).
func (m *memMaps) ringWrites() map[uint32]int {
	out := map[uint32]int{}
	for off, n := range m.ringWritesAt {
		for _, v := range m.vips {
			if v.Ring.Off == off {
				out[v.ID] += n
			}
		}
	}
	return out
}

func (m *memMaps) space(rs *[]uint32) []uint32 {
	if *rs == nil {
		*rs = make([]uint32, m.RingSlots())
	}
	return *rs
}

func (m *memMaps) RingAt(rg maps.RingRange) ([]uint32, error) {
	return append([]uint32(nil), m.space(&m.ring)[rg.Off:rg.End()]...), nil
}
func (m *memMaps) PrevRingAt(rg maps.RingRange) ([]uint32, error) {
	return append([]uint32(nil), m.space(&m.prev)[rg.Off:rg.End()]...), nil
}
func (m *memMaps) WriteRingAt(rg maps.RingRange, table []uint32) (int, error) {
	n := m.writeMem(m.space(&m.ring)[rg.Off:rg.End()], table)
	if m.ringWritesAt == nil {
		m.ringWritesAt = map[uint32]int{}
	}
	m.ringWritesAt[rg.Off] += n
	return n, nil
}
func (m *memMaps) WritePrevRingAt(rg maps.RingRange, table []uint32) (int, error) {
	return m.writeMem(m.space(&m.prev)[rg.Off:rg.End()], table), nil
}

func (m *memMaps) writeMem(cur, table []uint32) int {
	n := 0
	for i := range table {
		if cur[i] != table[i] {
			cur[i] = table[i]
			n++
		}
	}
	m.writes += n
	return n
}
func (m *memMaps) ResetVIPStats(uint32) error     { return nil }
func (m *memMaps) ResetBackendStats(uint32) error { return nil }

// checkRing compares a VIP's ring in the maps with a fresh Maglev build of its in-ring backends.
func checkRing(t *testing.T, m Maps, r *Reconciler, v VIP) {
	t.Helper()
	id, ok := r.VIPID(v.Key)
	if !ok {
		t.Fatalf("vip %s has no id", v.Key)
	}
	var bs []maglev.Backend
	out := map[uint32]bool{}
	for _, b := range v.Backends {
		bid, _ := r.BackendID(b.Addr)
		bs = append(bs, maglev.Backend{ID: bid, Identity: b.Addr.String(), Weight: b.Weight})
		out[bid] = !b.InRing
	}
	want, err := maglev.BuildDrained(bs, func(b maglev.Backend) bool { return out[b.ID] }, uint64(r.ringSize(&v)))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Ring(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("vip %s ring of %d slots, want %d", v.Key, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("vip %s ring slot %d holds %d, want %d", v.Key, i, got[i], want[i])
		}
	}
}

func be(a string, w uint32, in bool) Backend {
	return Backend{Addr: netip.MustParseAddr(a), Weight: w, InRing: in}
}

func vip(a string, port uint16, bs ...Backend) VIP {
	return VIP{Key: maps.VIPKey{Addr: netip.MustParseAddr(a), Port: port, Proto: maps.TCP}, Backends: bs}
}

// scenario runs the reconcile story on any Maps; reopen gives a Maps over the same state (a
// restart). It is shared by the in-memory and the real-maps tests.
// testMaps is a Maps that also reads rings by VIP id (memMaps, maps.Set).
type testMaps interface {
	Maps
	Ring(uint32) ([]uint32, error)
	PrevRing(uint32) ([]uint32, error)
}

func scenario(t *testing.T, m testMaps, reopen func() testMaps) {
	r, err := New(m)
	if err != nil {
		t.Fatal(err)
	}
	web := vip("198.18.100.1", 80, be("198.18.3.1", 1, true), be("198.18.3.2", 1, true), be("198.18.3.3", 1, true))
	dns := vip("198.18.100.2", 53, be("198.18.3.1", 1, true))
	res, err := r.Apply([]VIP{web, dns})
	if err != nil {
		t.Fatal(err)
	}
	if res.VIPsAdded != 2 || res.BackendsAdded != 3 || res.SlotsWritten != 2*ringSize {
		t.Fatalf("first apply: %+v", res)
	}
	checkRing(t, m, r, web)
	checkRing(t, m, r, dns)
	a1, _ := r.BackendID(netip.MustParseAddr("198.18.3.1"))

	// The same state again writes nothing.
	if res, err := r.Apply([]VIP{web, dns}); err != nil || res.Changed() {
		t.Fatalf("idempotent apply: %+v %v", res, err)
	}

	// Drain 198.18.3.2 of web: out of the ring, slot kept; only its slots move (Maglev).
	webID, _ := r.VIPID(web.Key)
	before, _ := m.Ring(webID)
	web.Backends[1].InRing = false
	res, err = r.Apply([]VIP{web, dns})
	if err != nil {
		t.Fatal(err)
	}
	if res.BackendsRemoved != 0 || res.RingsRebuilt != 1 || res.SlotsWritten > ringSize/3+ringSize/20 {
		t.Fatalf("drain: %+v (expected about a third of %d slots)", res, ringSize)
	}
	checkRing(t, m, r, web)
	// Second chance: the table the drain replaced is web's previous ring, slot for slot.
	if prev, _ := m.PrevRing(webID); !equal(prev, before) {
		t.Fatal("after the drain, web's previous ring is not the table before it")
	}
	if res.PrevSlotsWritten == 0 {
		t.Fatalf("drain wrote no previous-ring slot: %+v", res)
	}
	id2, ok := r.BackendID(netip.MustParseAddr("198.18.3.2"))
	if !ok {
		t.Fatal("drained backend lost its slot")
	}
	bes, _ := m.Backends()
	if !hasBackend(bes, id2) {
		t.Fatal("drained backend slot emptied in the map")
	}

	// Restart: a new reconciler over the same maps keeps every id and writes nothing.
	m2 := reopen()
	r2, err := New(m2)
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := r2.BackendID(netip.MustParseAddr("198.18.3.1")); id != a1 {
		t.Fatalf("backend id changed across restart: %d -> %d", a1, id)
	}
	for _, v := range []VIP{web, dns} {
		i1, _ := r.VIPID(v.Key)
		i2, ok := r2.VIPID(v.Key)
		if !ok || i1 != i2 {
			t.Fatalf("vip %s id changed across restart: %d -> %d", v.Key, i1, i2)
		}
	}
	if res, err := r2.Apply([]VIP{web, dns}); err != nil || res.Changed() {
		t.Fatalf("apply after restart: %+v %v", res, err)
	}
	r, m = r2, m2
	if prev, _ := m.PrevRing(webID); !equal(prev, before) {
		t.Fatal("web's previous ring changed across a restart")
	}
	drainedTable, _ := m.Ring(webID)

	// Remove 198.18.3.2 from web: its slot empties (flows re-hash). Remove dns: 198.18.3.1
	// stays (web lists it), dns's id frees and its ring clears.
	web.Backends = append(web.Backends[:1], web.Backends[2])
	dnsID, _ := r.VIPID(dns.Key)
	res, err = r.Apply([]VIP{web})
	if err != nil {
		t.Fatal(err)
	}
	if res.BackendsRemoved != 1 || res.VIPsRemoved != 1 {
		t.Fatalf("remove: %+v", res)
	}
	bes, _ = m.Backends()
	if hasBackend(bes, id2) || !hasBackend(bes, a1) {
		t.Fatalf("backend slots after remove: %+v", bes)
	}
	if _, has := r.RingRange(dnsID); has {
		t.Fatal("removed vip still has a ring range")
	}
	// Removing a backend that was out of the ring rebuilds the table without it in the base (a
	// drain moved only its slots; see maglev.BuildDrained): the drained table is the previous.
	checkRing(t, m, r, web)
	if prev, _ := m.PrevRing(webID); !equal(prev, drainedTable) {
		t.Fatal("after removing the drained backend, web's previous ring is not the drained table")
	}
	vs, _ := m.VIPs()
	if len(vs) != 1 || vs[0].Key != web.Key {
		t.Fatalf("vips after remove: %+v", vs)
	}

	// A new VIP takes the freed id; a new backend the freed slot.
	api := vip("198.18.100.3", 8080, be("198.18.3.9", 2, true))
	res, err = r.Apply([]VIP{web, api})
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := r.VIPID(api.Key); id != dnsID {
		t.Errorf("new vip id %d, want the freed %d", id, dnsID)
	}
	if id, _ := r.BackendID(netip.MustParseAddr("198.18.3.9")); id != id2 {
		t.Errorf("new backend id %d, want the freed %d", id, id2)
	}
	checkRing(t, m, r, api)
	checkRing(t, m, r, web)
	// The range freed by dns may be api's now: a ring placed anew is written whole, and its
	// previous ring is empty (dns's tables must not become api's second-chance candidates).
	if prev, _ := r.PrevRing(dnsID); !isZero(prev) {
		t.Fatal("new vip's previous ring holds another VIP's backends")
	}

	// Hash flags change: the VIP entry is rewritten, the ring is not.
	web.Flags = maps.HashSrcOnly
	res, err = r.Apply([]VIP{web, api})
	if err != nil || res.VIPsUpdated != 1 || res.SlotsWritten != 0 {
		t.Fatalf("flags change: %+v %v", res, err)
	}
	// Every backend out of the ring: the ring is empty (all zeros).
	for i := range api.Backends {
		api.Backends[i].InRing = false
	}
	if _, err := r.Apply([]VIP{web, api}); err != nil {
		t.Fatal(err)
	}
	checkRing(t, m, r, api)
}

func hasBackend(bs []maps.Backend, id uint32) bool {
	for _, b := range bs {
		if b.ID == id {
			return true
		}
	}
	return false
}

func TestReconcileInMemory(t *testing.T) {
	m := newMem()
	scenario(t, m, func() testMaps { return m })
}

// TestPreviousRingRetires: the previous ring stays until the next change by default; with a
// retirement time it empties that long after the change, and a table that does not change never
// rotates it.
func TestPreviousRingRetires(t *testing.T) {
	m := newMem()
	r, _ := New(m)
	clock := time.Unix(1000, 0)
	r.now = func() time.Time { return clock }
	web := vip("198.18.100.1", 80, be("198.18.3.1", 1, true), be("198.18.3.2", 1, true))
	if _, err := r.Apply([]VIP{web}); err != nil {
		t.Fatal(err)
	}
	id, _ := r.VIPID(web.Key)
	first, _ := m.Ring(id)
	web.Backends = append(web.Backends, be("198.18.3.3", 1, true))
	if _, err := r.Apply([]VIP{web}); err != nil {
		t.Fatal(err)
	}
	if prev, _ := m.PrevRing(id); !equal(prev, first) {
		t.Fatal("previous ring is not the table the added backend replaced")
	}
	// A drain that times out takes its backend out of the previous ring, and only it.
	a1, _ := r.BackendID(netip.MustParseAddr("198.18.3.1"))
	if n, err := r.DropFromPrevious(id, a1); err != nil || n == 0 {
		t.Fatalf("drop from previous: %d slots, %v", n, err)
	}
	prev, _ := m.PrevRing(id)
	for i, b := range prev {
		if b == a1 || (b == 0) != (first[i] == a1) {
			t.Fatalf("slot %d: previous %d, was %d: want only 198.18.3.1's slots emptied", i, b, first[i])
		}
	}
	first = prev
	// Nothing changes: the previous ring stays, whatever the time.
	if res, err := r.Apply([]VIP{web}); err != nil || res.PrevSlotsWritten != 0 {
		t.Fatalf("unchanged apply rotated the previous ring: %+v %v", res, err)
	}
	if n, _ := r.RetirePrevious(clock.Add(time.Hour)); n != 0 {
		t.Fatalf("retired %d slots with no retirement time set", n)
	}
	r.SetRetirePrevious(10 * time.Minute)
	if n, _ := r.RetirePrevious(clock.Add(9 * time.Minute)); n != 0 {
		t.Fatalf("retired %d slots before the retirement time", n)
	}
	if n, _ := r.RetirePrevious(clock.Add(10 * time.Minute)); n == 0 {
		t.Fatal("previous ring not retired at the retirement time")
	}
	if prev, _ := m.PrevRing(id); !isZero(prev) {
		t.Fatal("retired previous ring still holds candidates")
	}
}

func TestTooManyVIPs(t *testing.T) {
	r, _ := New(newMem())
	var vs []VIP
	for i := 0; i < 9; i++ {
		vs = append(vs, vip(fmt.Sprintf("198.18.100.%d", i+1), 80))
	}
	if _, err := r.Apply(vs); err == nil {
		t.Fatal("9 VIPs accepted in maps of 8")
	}
}

// TestReconcileRealMaps runs the same story on the forwarder's real maps, pinned in bpffs, with
// the restart done by loading the forwarder again from the pins.
func TestReconcileRealMaps(t *testing.T) {
	testutil.RequireRoot(t)
	pin := filepath.Join("/sys/fs/bpf/switchyard/test", fmt.Sprintf("reconcile-%d", os.Getpid()))
	t.Cleanup(func() { _ = loader.Detach(pin) })
	open := func() (*loader.Forwarder, *maps.Set) {
		f, err := loader.LoadForwarder(loader.Options{PinDir: pin, MaxVIPs: 8, RingSize: ringSize, MaxBackends: 64, ConnTableSize: 1024})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		s, err := maps.New(&f.Objs.LBMaps, ringSize)
		if err != nil {
			t.Fatal(err)
		}
		return f, s
	}
	_, s := open()
	scenario(t, s, func() testMaps { _, s2 := open(); return s2 })
}

// BenchmarkApplyRealMaps measures reconciliation on the real maps with the default ring (65537
// slots) and 16 backends: a VIP written from scratch, one backend drained and undrained (about
// 1/16 of the slots each way), and an apply with nothing to change.
func BenchmarkApplyRealMaps(b *testing.B) {
	testutil.RequireRoot(b)
	const size = maglev.DefaultSize
	f, err := loader.LoadForwarder(loader.Options{MaxVIPs: 4, RingSize: size, MaxBackends: 64, ConnTableSize: 1024})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	set, err := maps.New(&f.Objs.LBMaps, size)
	if err != nil {
		b.Fatal(err)
	}
	v := vip("198.18.100.1", 80)
	for i := 1; i <= 16; i++ {
		v.Backends = append(v.Backends, be(fmt.Sprintf("198.18.3.%d", i), 1, true))
	}
	b.Run("new-vip", func(b *testing.B) {
		slots := 0
		for i := 0; i < b.N; i++ {
			r, _ := New(set) // as a starting daemon does
			res, err := r.Apply([]VIP{v})
			if err != nil {
				b.Fatal(err)
			}
			slots += res.SlotsWritten
			if _, err := r.Apply(nil); err != nil { // remove it again for the next round
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(slots)/float64(b.N), "slots/op")
	})
	r, _ := New(set)
	if _, err := r.Apply([]VIP{v}); err != nil {
		b.Fatal(err)
	}
	b.Run("drain-one-of-16", func(b *testing.B) {
		slots := 0
		for i := 0; i < b.N; i++ {
			v.Backends[0].InRing = i%2 == 0
			res, err := r.Apply([]VIP{v})
			if err != nil {
				b.Fatal(err)
			}
			slots += res.SlotsWritten
		}
		b.ReportMetric(float64(slots)/float64(b.N), "slots/op")
	})
	b.Run("no-change", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if res, err := r.Apply([]VIP{v}); err != nil || res.SlotsWritten != 0 {
				b.Fatal(res, err)
			}
		}
	})
}
