package loader

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
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
	var p bpfobj.PassObjects
	if err := bpfobj.LoadPassObjects(&p, nil); err != nil {
		t.Fatal(err)
	}
	p.Close()
	var b bpfobj.BenchObjects
	if err := bpfobj.LoadBenchObjects(&b, nil); err != nil {
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
	bpfobj.LBMapVips:               {bpfobj.LBVipKey{}, bpfobj.LBVipMeta{}, "vip_key", "vip_meta"},
	bpfobj.LBMapVipsVersion:        {uint32(0), uint32(0), "__u32", "__u32"},
	bpfobj.LBMapVipCache:           {uint32(0), bpfobj.LBVipCacheEntry{}, "__u32", "vip_cache_entry"},
	bpfobj.LBMapVipAddrs:           {bpfobj.LBVipKey{}, uint32(0), "vip_key", "__u32"},
	bpfobj.LBMapVipFilter:          {uint32(0), uint32(0), "__u32", "__u32"},
	bpfobj.LBMapVipGens:            {uint32(0), uint32(0), "__u32", "__u32"},
	bpfobj.LBMapVipStats:           {uint32(0), bpfobj.LBCounter{}, "__u32", "counter"},
	bpfobj.LBMapVipDrops:           {uint32(0), bpfobj.LBCounter{}, "__u32", "counter"},
	bpfobj.LBMapBackends:           {uint32(0), bpfobj.LBBackend{}, "__u32", "backend"},
	bpfobj.LBMapBackendStats:       {uint32(0), bpfobj.LBCounter{}, "__u32", "counter"},
	bpfobj.LBMapRings16:            {uint32(0), bpfobj.LBRingWord{}, "__u32", "ring_word"},
	bpfobj.LBMapPrevRings16:        {uint32(0), bpfobj.LBRingWord{}, "__u32", "ring_word"},
	bpfobj.LBMapConntrack:          {bpfobj.LBFlowKey{}, bpfobj.LBFlowState{}, "flow_key", "flow_state"},
	bpfobj.LBMapConntrack4:         {bpfobj.LBFlowKey4{}, bpfobj.LBFlowState{}, "flow_key4", "flow_state"},
	bpfobj.LBMapConntrackSyn:       {bpfobj.LBFlowKey{}, bpfobj.LBFlowState{}, "flow_key", "flow_state"},
	bpfobj.LBMapConntrackSyn4:      {bpfobj.LBFlowKey4{}, bpfobj.LBFlowState{}, "flow_key4", "flow_state"},
	bpfobj.LBMapGuardVips:          {uint32(0), bpfobj.LBGuardVip{}, "__u32", "guard_vip"},
	bpfobj.LBMapGuardVipBuckets:    {uint32(0), bpfobj.LBGuardBucket{}, "__u32", "guard_bucket"},
	bpfobj.LBMapGuardAllow:         {bpfobj.LBGuardPrefixKey{}, uint32(0), "guard_prefix_key", "__u32"},
	bpfobj.LBMapGuardDeny:          {bpfobj.LBGuardPrefixKey{}, uint32(0), "guard_prefix_key", "__u32"},
	bpfobj.LBMapGuardSrc:           {bpfobj.LBGuardSrcKey{}, bpfobj.LBGuardBucket{}, "guard_src_key", "guard_bucket"},
	bpfobj.LBMapGuardCounters:      {uint32(0), bpfobj.LBCounter{}, "__u32", "counter"},
	bpfobj.LBMapConfig:             {uint32(0), bpfobj.LBLbConfig{}, "__u32", "lb_config"},
	bpfobj.LBMapCounters:           {uint32(0), bpfobj.LBLbPercpu{}, "__u32", "lb_percpu"},
	bpfobj.LBMapScCounters:         {uint32(0), bpfobj.LBCounter{}, "__u32", "counter"},
	bpfobj.LBMapQuicServers:        {uint32(0), uint32(0), "__u32", "__u32"},
	bpfobj.LBMapQuicCounters:       {uint32(0), bpfobj.LBCounter{}, "__u32", "counter"},
	bpfobj.DecapMapDecapAddrs:      {bpfobj.DecapDecapKey{}, uint32(0), "decap_key", "__u32"},
	bpfobj.DecapMapDecapCounters:   {uint32(0), bpfobj.LBCounter{}, "__u32", "counter"},
	bpfobj.DecapMapDecapScCounters: {uint32(0), bpfobj.LBCounter{}, "__u32", "counter"},
	bpfobj.DecapMapDecapScRefused:  {uint32(0), bpfobj.LBCounter{}, "__u32", "counter"},
	bpfobj.DecapMapDecapScPeers:    {bpfobj.DecapScPrefixKey{}, uint32(0), "sc_prefix_key", "__u32"},
	bpfobj.DecapMapDecapScSources:  {bpfobj.DecapScPrefixKey{}, uint32(0), "sc_prefix_key", "__u32"},
	bpfobj.BenchMapFloorTable:      {bpfobj.BenchFloorKey{}, uint64(0), "floor_key", "__u64"},
	bpfobj.BenchMapFloorColdTable:  {bpfobj.BenchFloorKey{}, uint64(0), "floor_key", "__u64"},
}

// TestMapTypesMatchGo checks every map of the four objects against the Go types the code uses
// with it: the C type the map declares (by name, so a map that moves to another struct of the same
// size is caught too) and its key and value sizes. A map missing from mapTypes fails, so a new map
// gets its Go types named.
func TestMapTypesMatchGo(t *testing.T) {
	for _, load := range []func() (*ebpf.CollectionSpec, error){bpfobj.LoadLB, bpfobj.LoadDecap, bpfobj.LoadPass, bpfobj.LoadBench} {
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
	spec, err := bpfobj.LoadLB()
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
