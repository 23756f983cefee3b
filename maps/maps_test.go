package maps

import (
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
)

// The map API's tests: each runs on the real maps of a freshly loaded forwarder (no program
// attached, no packets). What the program does with the maps is tested in loader/ (the data
// plane) and control/reconcile (the reconciler).

const testRing = 13

// newSet loads the forwarder's maps (nothing pinned) and wraps them.
func newSet(t *testing.T) *Set {
	t.Helper()
	testutil.RequireRoot(t)
	f, err := loader.LoadForwarder(loader.Options{MaxVIPs: 8, RingSize: testRing, MaxBackends: 64, ConnTableSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s, err := New(&f.Objs.LBMaps, testRing)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRingsOutsideRefused: a ring range past the ring maps' slots is refused naming the fix, for
// a range given and for the fixed one of an id (id x ring size), and nothing is written.
func TestRingsOutsideRefused(t *testing.T) {
	testutil.RequireRoot(t)
	f, err := loader.LoadForwarder(loader.Options{MaxVIPs: 8, RingSize: testRing, MaxBackends: 64, ConnTableSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := New(&f.Objs.LBMaps, 251)
	if err != nil {
		t.Fatal(err)
	}
	if s.RingSlots() < 8*testRing || s.RingSlots() >= 8*testRing+4 {
		t.Fatalf("ring slots %d, want 8 x %d rounded up to whole words", s.RingSlots(), testRing)
	}
	k := VIPKey{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: TCP}
	for _, v := range []VIP{{Key: k, ID: 0}, {Key: k, ID: 1, Ring: RingRange{Off: 100, Size: 13}}} {
		if err := s.PutVIP(v); err == nil || !strings.Contains(err.Error(), "raise ring_slots") {
			t.Errorf("PutVIP(%+v): %v, want a refusal naming ring_slots", v, err)
		}
	}
	if vs, _ := s.VIPs(); len(vs) != 0 {
		t.Fatalf("refused VIPs written: %+v", vs)
	}
	if _, err := New(nil, testRing); err == nil {
		t.Fatal("no maps accepted")
	}
}

func TestVIPs(t *testing.T) {
	s := newSet(t)
	web := VIP{Key: VIPKey{Addr: netip.MustParseAddr("198.18.100.1"), Port: 80, Proto: TCP}, ID: 1, Ring: RingRange{Off: testRing, Size: testRing}}
	dns6 := VIP{Key: VIPKey{Addr: netip.MustParseAddr("fd00:5e:100::1"), Port: 53, Proto: UDP}, ID: 0, Flags: HashSrcOnly}
	for _, v := range []VIP{web, dns6} {
		if err := s.PutVIP(v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.VIPs()
	dns6.Ring = RingRange{Off: 0, Size: testRing} // the fixed range of id 0
	if err != nil || !slices.Equal(got, []VIP{dns6, web}) {
		t.Fatalf("VIPs() = %+v, %v; want %+v sorted by id", got, err, []VIP{dns6, web})
	}
	for _, bad := range []VIP{{ID: 2}, {Key: web.Key, ID: 8}} {
		if err := s.PutVIP(bad); err == nil {
			t.Errorf("PutVIP(%+v) accepted", bad)
		}
	}
	if err := s.DeleteVIP(web.Key); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteVIP(web.Key); err != nil {
		t.Errorf("deleting a VIP twice: %v, want nothing to do", err)
	}
	if got, _ := s.VIPs(); !slices.Equal(got, []VIP{dns6}) {
		t.Fatalf("after DeleteVIP: %+v, want only %+v", got, dns6)
	}
}

func TestBackends(t *testing.T) {
	s := newSet(t)
	want := []Backend{{ID: 1, Addr: netip.MustParseAddr("198.18.3.11")}, {ID: 63, Addr: netip.MustParseAddr("fd00:5e:3::12")}}
	for _, b := range want {
		if err := s.PutBackend(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, bad := range []Backend{{ID: 0, Addr: want[0].Addr}, {ID: 64, Addr: want[0].Addr}, {ID: 2}} {
		if err := s.PutBackend(bad); err == nil {
			t.Errorf("PutBackend(%+v) accepted", bad)
		}
	}
	if got, err := s.Backends(); err != nil || !slices.Equal(got, want) {
		t.Fatalf("Backends() = %+v, %v; want %+v", got, err, want)
	}
	if err := s.DeleteBackend(1); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Backends(); !slices.Equal(got, want[1:]) {
		t.Fatalf("after DeleteBackend(1): %+v, want %+v", got, want[1:])
	}
}

// TestRings: WriteRing writes only the slots that differ; RotateRing keeps the ring it replaces
// as the previous ring and writes nothing when the table is the same.
func TestRings(t *testing.T) {
	s := newSet(t)
	a := make([]uint32, testRing)
	b := make([]uint32, testRing)
	for i := range a {
		a[i] = uint32(1 + i%3)
		b[i] = a[i]
	}
	b[0], b[5] = 9, 9
	if n, err := s.WriteRing(2, nil, a); err != nil || n != testRing {
		t.Fatalf("first WriteRing: %d slots (%v), want all %d", n, err, testRing)
	}
	if n, _ := s.WriteRing(2, a, a); n != 0 {
		t.Errorf("WriteRing of the same table wrote %d slots, want 0", n)
	}
	n, pn, err := s.RotateRing(2, b)
	if err != nil || n != 2 || pn != testRing {
		t.Fatalf("RotateRing: %d ring and %d previous slots (%v), want 2 and %d", n, pn, err, testRing)
	}
	if got, _ := s.Ring(2); !slices.Equal(got, b) {
		t.Errorf("ring %v, want %v", got, b)
	}
	if got, _ := s.PrevRing(2); !slices.Equal(got, a) {
		t.Errorf("previous ring %v, want the replaced %v", got, a)
	}
	if n, pn, _ := s.RotateRing(2, b); n != 0 || pn != 0 {
		t.Errorf("RotateRing to the same table wrote %d and %d slots, want none", n, pn)
	}
	if other, _ := s.Ring(3); slices.ContainsFunc(other, func(id uint32) bool { return id != 0 }) {
		t.Errorf("VIP 3's ring changed: %v", other)
	}
	if _, err := s.WriteRing(2, nil, a[:5]); err == nil {
		t.Error("a table of the wrong size accepted")
	}
	if _, err := s.WriteRing(8, nil, a); err == nil {
		t.Error("a VIP id beyond max_vips accepted")
	}
}

func TestConfig(t *testing.T) {
	s := newSet(t)
	want := Config{
		IfMAC: net.HardwareAddr{2, 0x5e, 0, 0, 2, 0x11}, NextHopMAC: net.HardwareAddr{2, 0x5e, 0, 0, 2, 1},
		MTU: 1500, Src4: netip.MustParseAddr("198.18.255.0"), Src4HashBits: 8, Src6: netip.MustParseAddr("fd00:5e:ff::"),
		UDPTimeout: 30 * time.Second, ICMPTooBig: true, SecondChance: true, SYNInsertLimit: 1000,
	}
	if err := s.SetConfig(want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Config()
	if err != nil {
		t.Fatal(err)
	}
	if got.IfMAC.String() != want.IfMAC.String() || got.NextHopMAC.String() != want.NextHopMAC.String() ||
		got.MTU != want.MTU || got.Src4 != want.Src4 || got.Src4HashBits != want.Src4HashBits || got.Src6 != want.Src6 ||
		got.UDPTimeout != want.UDPTimeout || got.ICMPTooBig != want.ICMPTooBig || got.SecondChance != want.SecondChance ||
		got.SYNInsertLimit != want.SYNInsertLimit {
		t.Fatalf("Config() = %+v, want %+v", got, want)
	}
	want.ICMPTooBig, want.SecondChance = false, false
	if err := s.SetConfig(want); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Config(); got.ICMPTooBig || got.SecondChance {
		t.Errorf("flags cleared, read back %+v", got)
	}
	for _, bad := range []Config{{IfMAC: want.IfMAC, MTU: 1500}, {IfMAC: want.IfMAC, NextHopMAC: want.NextHopMAC, MTU: 500},
		{IfMAC: want.IfMAC, NextHopMAC: want.NextHopMAC, MTU: 1500, Src4HashBits: 25}} {
		if err := s.SetConfig(bad); err == nil {
			t.Errorf("SetConfig(%+v) accepted", bad)
		}
	}
}

// TestFlows: entries written per VIP are found, listed (IPv4 and IPv6) and deleted per VIP and
// backend, per backend, or all; cutting one VIP's flows to a backend leaves that backend's flows
// of other VIPs alone (drain timeout of an address shared by two VIPs).
func TestFlows(t *testing.T) {
	s := newSet(t)
	flow := func(src string, sport, dport uint16) Flow {
		a := netip.MustParseAddr(src)
		dst := netip.MustParseAddr("198.18.100.1")
		if a.Is6() {
			dst = netip.MustParseAddr("fd00:5e:100::1")
		}
		return Flow{Src: netip.AddrPortFrom(a, sport), Dst: netip.AddrPortFrom(dst, dport), Proto: TCP}
	}
	for sport := uint16(100); sport < 110; sport++ {
		for vip, port := range map[uint32]uint16{0: 80, 1: 443} {
			if err := s.PutFlow(flow("198.18.1.11", sport, port), 7, vip); err != nil {
				t.Fatal(err)
			}
		}
	}
	v6 := flow("fd00:5e:1::11", 200, 80)
	if err := s.PutFlow(v6, 8, 0); err != nil {
		t.Fatal(err)
	}
	if e, ok, err := s.LookupFlow(v6); err != nil || !ok || e.Backend != 8 || e.VIPID != 0 || e.Flow != v6 {
		t.Fatalf("LookupFlow(%s) = %+v %v %v", v6, e, ok, err)
	}
	if _, ok, err := s.LookupFlow(flow("198.18.1.11", 1, 80)); ok || err != nil {
		t.Fatalf("a flow never written found (%v)", err)
	}
	if flows, _ := s.Flows(); len(flows) != 21 {
		t.Fatalf("%d flows listed, want 21", len(flows))
	}
	if n, err := s.DeleteFlows(0, 7); err != nil || n != 10 {
		t.Fatalf("DeleteFlows(0, 7) deleted %d (%v), want 10", n, err)
	}
	flows, _ := s.Flows()
	if len(flows) != 11 {
		t.Fatalf("%d flows left, want the other VIP's 10 and the IPv6 one", len(flows))
	}
	for _, f := range flows {
		if f.Backend == 7 && (f.VIPID != 1 || f.Dst.Port() != 443) {
			t.Fatalf("wrong flow left: %+v", f)
		}
	}
	if n, _ := s.DeleteFlowsTo(7); n != 10 {
		t.Errorf("DeleteFlowsTo(7) deleted %d, want 10", n)
	}
	if n, _ := s.DeleteAllFlows(); n != 1 {
		t.Errorf("DeleteAllFlows deleted %d, want the IPv6 flow", n)
	}
	if flows, _ := s.Flows(); len(flows) != 0 {
		t.Errorf("%d flows after DeleteAllFlows", len(flows))
	}
}
