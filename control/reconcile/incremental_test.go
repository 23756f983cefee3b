package reconcile

import (
	"fmt"
	"net/netip"
	"testing"
)

// sigMaps is a memMaps that keeps ring signatures, as maps.Set does with a ring_sigs map.
type sigMaps struct {
	*memMaps
	sigs map[uint32]uint64
}

func (m *sigMaps) RingSig(id uint32) uint64 { return m.sigs[id] }
func (m *sigMaps) SetRingSig(id uint32, sig uint64) error {
	m.sigs[id] = sig
	return nil
}

// manyVIPs is n VIPs of 4 backends each, every VIP with its own set (neighbours share some).
func manyVIPs(n int) []VIP {
	var out []VIP
	for i := 0; i < n; i++ {
		v := vip(fmt.Sprintf("198.18.%d.%d", 100+i/250, 1+i%250), 80)
		for j := 0; j < 4; j++ {
			k := i*2 + j
			v.Backends = append(v.Backends, be(fmt.Sprintf("10.0.%d.%d", k/250, 1+k%250), uint32(1+j%2), true))
		}
		out = append(out, v)
	}
	return out
}

func clone(vs []VIP) []VIP {
	out := make([]VIP, len(vs))
	for i, v := range vs {
		out[i] = v
		out[i].Backends = append([]Backend(nil), v.Backends...)
	}
	return out
}

// sameAsFullRebuild checks that every VIP's ring equals what a reconciler starting from empty
// maps writes for the same desired state (and its previous ring is not compared: it carries
// history).
func sameAsFullRebuild(t *testing.T, m *memMaps, r *Reconciler, desired []VIP) {
	t.Helper()
	fresh := newMem()
	fresh.maxV, fresh.maxB = m.maxV, m.maxB
	fr, _ := New(fresh)
	if _, err := fr.Apply(clone(desired)); err != nil {
		t.Fatal(err)
	}
	for _, v := range desired {
		checkRing(t, m, r, v)
		id, _ := r.VIPID(v.Key)
		fid, _ := fr.VIPID(v.Key)
		got, _ := m.Ring(id)
		want, _ := fresh.Ring(fid)
		for i := range got {
			ga, _ := r.BackendAddr(got[i])
			wa, _ := fr.BackendAddr(want[i])
			if ga != wa {
				t.Fatalf("vip %s slot %d: incremental gives %s, full rebuild %s", v.Key, i, ga, wa)
			}
		}
	}
}

// TestIncrementalRebuild: a drain, a weight change and a new VIP build and write only the VIP
// they touch, and leave every table as a full rebuild makes it.
func TestIncrementalRebuild(t *testing.T) {
	m := newMem()
	m.maxV, m.maxB = 64, 256
	r, _ := New(m)
	vs := manyVIPs(50)
	res, err := r.Apply(clone(vs))
	if err != nil {
		t.Fatal(err)
	}
	if res.TablesBuilt != 50 || res.RingsRebuilt != 50 {
		t.Fatalf("first apply: %+v, want 50 tables built and written", res)
	}
	step := func(what string, mutate func(), changed maps0) {
		t.Helper()
		mutate()
		m.ringWritesAt = nil
		res, err := r.Apply(clone(vs))
		if err != nil {
			t.Fatal(err)
		}
		if res.TablesBuilt != len(changed) || res.RingsRebuilt != len(changed) {
			t.Fatalf("%s: %+v, want %d table(s) built and written", what, res, len(changed))
		}
		for id, n := range m.ringWrites() {
			if n > 0 && !changed[id] {
				t.Fatalf("%s: wrote %d slots of vip id %d, which did not change", what, n, id)
			}
		}
		sameAsFullRebuild(t, m, r, vs)
	}
	id7, _ := r.VIPID(vs[7].Key)
	step("drain", func() { vs[7].Backends[1].InRing = false }, maps0{id7: true})
	step("undrain", func() { vs[7].Backends[1].InRing = true }, maps0{id7: true})
	id20, _ := r.VIPID(vs[20].Key)
	step("weight", func() { vs[20].Backends[0].Weight = 5 }, maps0{id20: true})
	// The order the configuration lists backends in is no change.
	step("reorder", func() {
		b := vs[3].Backends
		b[0], b[3] = b[3], b[0]
	}, maps0{})
	step("vip add", func() {
		nv := vip("198.18.200.1", 443, be("10.9.0.1", 1, true), be("10.9.0.2", 1, true))
		vs = append(vs, nv)
	}, maps0{50: true})
	if id, _ := r.VIPID(vs[50].Key); id != 50 {
		t.Fatalf("new vip id %d, want 50", id)
	}
}

type maps0 = map[uint32]bool

// TestAdoptBuildsNothing: a reconciler started over maps that keep ring signatures (a daemon
// restart) builds no table when nothing changed, and only the changed VIP's when one did; maps
// without signatures build every table once and write nothing.
func TestAdoptBuildsNothing(t *testing.T) {
	m := &sigMaps{memMaps: newMem(), sigs: map[uint32]uint64{}}
	m.maxV, m.maxB = 64, 256
	r, _ := New(m)
	vs := manyVIPs(40)
	if _, err := r.Apply(clone(vs)); err != nil {
		t.Fatal(err)
	}
	r2, _ := New(m)
	res, err := r2.Apply(clone(vs))
	if err != nil || res.TablesBuilt != 0 || res.Changed() {
		t.Fatalf("adopt with signatures: %+v %v, want nothing built or written", res, err)
	}
	vs[5].Backends[0].InRing = false
	r3, _ := New(m)
	if res, err := r3.Apply(clone(vs)); err != nil || res.TablesBuilt != 1 || res.RingsRebuilt != 1 {
		t.Fatalf("adopt with one drain: %+v %v, want one table", res, err)
	}
	sameAsFullRebuild(t, m.memMaps, r3, vs)
	// A ring rewritten behind the reconciler's back with its signature cleared (an older binary,
	// see loader.RingSigs) is built again.
	id, _ := r3.VIPID(vs[9].Key)
	m.sigs[id] = 0
	rg, _ := m.rangeOf(id)
	clear(m.ring[rg.Off:rg.End()])
	r4, _ := New(m)
	if res, err := r4.Apply(clone(vs)); err != nil || res.TablesBuilt != 1 || res.RingsRebuilt != 1 {
		t.Fatalf("adopt with an unknown signature: %+v %v, want that VIP rebuilt", res, err)
	}
	sameAsFullRebuild(t, m.memMaps, r4, vs)
	plain := newMem()
	plain.maxV, plain.maxB = 64, 256
	rp, _ := New(plain)
	if _, err := rp.Apply(clone(vs)); err != nil {
		t.Fatal(err)
	}
	rp2, _ := New(plain)
	if res, err := rp2.Apply(clone(vs)); err != nil || res.TablesBuilt != 40 || res.Changed() {
		t.Fatalf("adopt without signatures: %+v %v, want 40 builds and no write", res, err)
	}
}

// TestManyBackendIDs: 60,000 distinct backends get ids 1..60,000 in one pass (the allocator
// once scanned every used id per new one: quadratic), and a freed id is the next one given.
func TestManyBackendIDs(t *testing.T) {
	const n = 60000
	m := newMem()
	m.maxV, m.maxB = 4, 65536
	r, _ := New(m)
	v := vip("198.18.100.1", 80)
	for i := 0; i < n; i++ {
		v.Backends = append(v.Backends, be(fmt.Sprintf("10.%d.%d.%d", i/65536, i/256%256, i%256), 1, i < 16))
	}
	if _, err := r.Apply([]VIP{v}); err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]bool{}
	for _, b := range v.Backends {
		id, ok := r.BackendID(b.Addr)
		if !ok || id == 0 || id > n || seen[id] {
			t.Fatalf("backend %s: id %d (ok %v), want a distinct id in 1..%d", b.Addr, id, ok, n)
		}
		seen[id] = true
	}
	freed, _ := r.BackendID(v.Backends[100].Addr)
	v.Backends = append(v.Backends[:100], v.Backends[101:]...)
	if _, err := r.Apply([]VIP{v}); err != nil {
		t.Fatal(err)
	}
	v.Backends = append(v.Backends, be("10.200.0.1", 1, false))
	if _, err := r.Apply([]VIP{v}); err != nil {
		t.Fatal(err)
	}
	if id, _ := r.BackendID(netip.MustParseAddr("10.200.0.1")); id != freed {
		t.Fatalf("new backend got id %d, want the freed %d", id, freed)
	}
}
