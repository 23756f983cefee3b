package loader

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/internal/testutil"
)

// TestLoadAll loads every program through the kernel verifier.
func TestLoadAll(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.RequireKernel(t, testutil.XDP)
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
	var b BenchObjects
	if err := LoadBenchObjects(&b, nil); err != nil {
		t.Fatal(err)
	}
	b.Close()
}

// mapTypes are the Go types the code reads and writes each map with, and the C types it assumes
// the map holds (a bpf2go twin is generated from the C type of the same name).
var mapTypes = map[string]struct {
	key, value   any
	cKey, cValue string
}{
	LBMapVips:               {LBVipKey{}, LBVipMeta{}, "vip_key", "vip_meta"},
	LBMapVipAddrs:           {LBVipKey{}, uint32(0), "vip_key", "__u32"},
	LBMapVipFilter:          {uint32(0), uint32(0), "__u32", "__u32"},
	LBMapVipGens:            {uint32(0), uint32(0), "__u32", "__u32"},
	LBMapVipStats:           {uint32(0), LBCounter{}, "__u32", "counter"},
	LBMapVipDrops:           {uint32(0), LBCounter{}, "__u32", "counter"},
	LBMapBackends:           {uint32(0), LBBackend{}, "__u32", "backend"},
	LBMapBackendStats:       {uint32(0), LBCounter{}, "__u32", "counter"},
	LBMapRings16:            {uint32(0), LBRingWord{}, "__u32", "ring_word"},
	LBMapPrevRings16:        {uint32(0), LBRingWord{}, "__u32", "ring_word"},
	LBMapConntrack:          {LBFlowKey{}, LBFlowState{}, "flow_key", "flow_state"},
	LBMapConntrack4:         {LBFlowKey4{}, LBFlowState{}, "flow_key4", "flow_state"},
	LBMapConfig:             {uint32(0), LBLbConfig{}, "__u32", "lb_config"},
	LBMapCounters:           {uint32(0), LBLbPercpu{}, "__u32", "lb_percpu"},
	LBMapScCounters:         {uint32(0), LBCounter{}, "__u32", "counter"},
	LBMapQuicServers:        {uint32(0), uint32(0), "__u32", "__u32"},
	LBMapQuicCounters:       {uint32(0), LBCounter{}, "__u32", "counter"},
	DecapMapDecapAddrs:      {DecapDecapKey{}, uint32(0), "decap_key", "__u32"},
	DecapMapDecapCounters:   {uint32(0), LBCounter{}, "__u32", "counter"},
	DecapMapDecapScCounters: {uint32(0), LBCounter{}, "__u32", "counter"},
	DecapMapDecapScRefused:  {uint32(0), LBCounter{}, "__u32", "counter"},
	DecapMapDecapScPeers:    {DecapScPrefixKey{}, uint32(0), "sc_prefix_key", "__u32"},
	DecapMapDecapScSources:  {DecapScPrefixKey{}, uint32(0), "sc_prefix_key", "__u32"},
	BenchMapFloorTable:      {BenchFloorKey{}, uint64(0), "floor_key", "__u64"},
}

// TestMapTypesMatchGo checks every map of the four objects against the Go types the code uses
// with it: the C type the map declares (by name, so a map that moves to another struct of the same
// size is caught too) and its key and value sizes. A map missing from mapTypes fails, so a new map
// gets its Go types named.
func TestMapTypesMatchGo(t *testing.T) {
	for _, load := range []func() (*ebpf.CollectionSpec, error){LoadLB, LoadDecap, LoadPass, LoadBench} {
		spec, err := load()
		if err != nil {
			t.Fatal(err)
		}
		for name, m := range spec.Maps {
			want, ok := mapTypes[name]
			if !ok {
				t.Errorf("map %s: not in mapTypes; add the Go key and value types the code uses for it", name)
				continue
			}
			if m.Key.TypeName() != want.cKey || m.Value.TypeName() != want.cValue {
				t.Errorf("map %s holds %s -> %s in C, the Go code assumes %s -> %s", name, m.Key.TypeName(), m.Value.TypeName(), want.cKey, want.cValue)
			}
			if k, v := binary.Size(want.key), binary.Size(want.value); uint32(k) != m.KeySize || uint32(v) != m.ValueSize {
				t.Errorf("map %s: C key %d value %d bytes, Go %T %d and %T %d", name, m.KeySize, m.ValueSize, want.key, k, want.value, v)
			}
		}
	}
}

// TestPinnedLayout checks the sizes of the structs held in pinned maps against the layout (v3) the
// pins of a running balancer were made with: a change here needs a new layout version (docs/xdp.md,
// "Maps and pins"), not just a rebuild.
func TestPinnedLayout(t *testing.T) {
	spec, err := LoadLB()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint32{"flow_key": 40, "flow_key4": 16, "flow_state": 24, "vip_key": 20, "vip_meta": 16, "backend": 24, "lb_config": 64, "counter": 16, "lb_percpu": 17*16 + 32}
	for name, size := range want {
		typ, err := spec.Types.AnyTypeByName(name)
		if err != nil {
			t.Fatalf("btf type %s: %v", name, err)
		}
		if got, err := sizeof(typ); err != nil || got != size {
			t.Errorf("struct %s: %d bytes (%v), pinned layout has %d", name, got, err, size)
		}
	}
}

// TestPerVIPMapsSized loads the forwarder with more VIPs than the C defaults and checks that
// every map holding one entry per VIP was sized from MaxVIPs: vip_gens once stayed at 64, so the
// 65th VIP failed with "read vip generation 64: lookup: key does not exist".
func TestPerVIPMapsSized(t *testing.T) {
	testutil.RequireRoot(t)
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
