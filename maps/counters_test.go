package maps

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// TestAllStatsBatch: the batch reads give, slot for slot, what one lookup per id gives, across
// more slots than one batch holds.
func TestAllStatsBatch(t *testing.T) {
	testutil.RequireRoot(t)
	f, err := loader.LoadForwarder(loader.Options{MaxVIPs: 8, RingSize: 13, MaxBackends: 10000, ConnTableSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := New(&f.Objs.LBMaps, 13)
	if err != nil {
		t.Fatal(err)
	}
	ncpu, _ := ebpf.PossibleCPU()
	for _, id := range []uint32{1, 77, 4095, 4096, 9999} {
		per := make([]bpfobj.LBCounter, ncpu)
		for c := range per {
			per[c] = bpfobj.LBCounter{Packets: uint64(id) + uint64(c), Bytes: uint64(id) * 100}
		}
		if err := f.Objs.BackendStats.Put(id, per); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.AllBackendStats()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 10000 {
		t.Fatalf("%d slots, want 10000", len(all))
	}
	for id := uint32(0); id < 10000; id++ {
		one, err := s.BackendStats(id)
		if err != nil {
			t.Fatal(err)
		}
		if one != all[id] {
			t.Fatalf("backend %d: batch %+v, lookup %+v", id, all[id], one)
		}
	}
	if all[9999].Packets == 0 {
		t.Fatal("the last slot read as zero")
	}
	if v, err := s.AllVIPStats(); err != nil || len(v) != 8 {
		t.Fatalf("vip stats: %d slots, %v", len(v), err)
	}
}
