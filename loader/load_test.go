package loader

import (
	"os"
	"testing"
	"unsafe"
)

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs (run `make test` as root)")
	}
}

// TestLoadAll loads every program through the kernel verifier.
func TestLoadAll(t *testing.T) {
	requireRoot(t)
	f, err := LoadForwarder(Options{RingSize: 13, MaxVIPs: 4})
	if err != nil {
		t.Fatalf("%+v", err)
	}
	f.Close()
	d, err := OpenDecap("")
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	var p PassObjects
	if err := LoadPassObjects(&p, nil); err != nil {
		t.Fatal(err)
	}
	p.Close()
}

// TestSharedStructSizes checks that the Go twins of the C structs have the C sizes (as recorded
// in the BTF of the object), so the two sides agree on every map's layout.
func TestSharedStructSizes(t *testing.T) {
	spec, err := LoadLB()
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]uintptr{
		"flow_key":   unsafe.Sizeof(LBFlowKey{}),
		"flow_state": unsafe.Sizeof(LBFlowState{}),
		"vip_key":    unsafe.Sizeof(LBVipKey{}),
		"vip_meta":   unsafe.Sizeof(LBVipMeta{}),
		"backend":    unsafe.Sizeof(LBBackend{}),
		"lb_config":  unsafe.Sizeof(LBLbConfig{}),
		"counter":    unsafe.Sizeof(LBCounter{}),
		"lb_percpu":  unsafe.Sizeof(LBLbPercpu{}),
	}
	want := map[string]uint32{"flow_key": 40, "flow_state": 24, "vip_key": 20, "vip_meta": 8, "backend": 24, "lb_config": 64, "counter": 16, "lb_percpu": 17*16 + 32}
	for name, goSize := range cases {
		var st interface{ TypeName() string }
		_ = st
		typ, err := spec.Types.AnyTypeByName(name)
		if err != nil {
			t.Fatalf("btf type %s: %v", name, err)
		}
		cSize, err := sizeof(typ)
		if err != nil {
			t.Fatal(err)
		}
		if uint32(goSize) != cSize || cSize != want[name] {
			t.Errorf("struct %s: C %d bytes, Go %d bytes, expected %d", name, cSize, goSize, want[name])
		}
	}
	if got := len(LBLbPercpu{}.Cnt); got != 17 {
		t.Errorf("struct lb_percpu holds %d counters; update maps.CounterNames with enum counter_index", got)
	}
	if got := spec.Maps[LBMapScCounters].MaxEntries; int(got) != 3 {
		t.Errorf("sc_counters map has %d entries; update maps.SecondChanceCounterNames with enum sc_counter_index", got)
	}
}

// TestPerVIPMapsSized loads the forwarder with more VIPs than the C defaults and checks that
// every map holding one entry per VIP was sized from MaxVIPs: vip_gens once stayed at 64, so the
// 65th VIP failed with "read vip generation 64: lookup: key does not exist".
func TestPerVIPMapsSized(t *testing.T) {
	requireRoot(t)
	const maxVIPs = 4096
	f, err := LoadForwarder(Options{RingSize: 13, MaxVIPs: maxVIPs, MaxBackends: 64, ConnTableSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := f.Objs.LBMaps
	for name, mp := range map[string]interface{ MaxEntries() uint32 }{
		"vips": m.Vips, "vip_addrs": m.VipAddrs, "vip_gens": m.VipGens, "vip_stats": m.VipStats,
	} {
		if got := mp.MaxEntries(); got != maxVIPs {
			t.Errorf("map %s holds %d entries, want max_vips %d", name, got, maxVIPs)
		}
	}
	var g uint32
	if err := m.VipGens.Lookup(uint32(maxVIPs-1), &g); err != nil {
		t.Errorf("vip generation of the last VIP id %d: %v", maxVIPs-1, err)
	}
}
