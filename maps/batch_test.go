package maps

import (
	"net/netip"
	"testing"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
)

// TestBackendsBatch: the batch read lists exactly the occupied backend slots, by id, across
// more slots than one batch holds (the first and last ids included).
func TestBackendsBatch(t *testing.T) {
	testutil.RequireRoot(t)
	f, err := loader.LoadForwarder(loader.Options{MaxVIPs: 8, RingSize: 13, MaxBackends: 3 * batchChunk, ConnTableSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s, err := New(&f.Objs.LBMaps, 13)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint32]netip.Addr{}
	for _, id := range []uint32{1, 2, batchChunk - 1, batchChunk, batchChunk + 1, 2*batchChunk + 7, 3*batchChunk - 1} {
		a := netip.AddrFrom4([4]byte{10, byte(id >> 16), byte(id >> 8), byte(id)})
		if id%2 == 0 {
			a = netip.MustParseAddr("fd00::1").Next()
			for k := uint32(0); k < id%50; k++ {
				a = a.Next()
			}
		}
		if err := s.PutBackend(Backend{ID: id, Addr: a}); err != nil {
			t.Fatal(err)
		}
		want[id] = a
	}
	if err := s.DeleteBackend(2); err != nil {
		t.Fatal(err)
	}
	delete(want, 2)
	got, err := s.Backends()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d backends listed, want %d: %v", len(got), len(want), got)
	}
	for i, b := range got {
		if want[b.ID] != b.Addr {
			t.Errorf("backend %d: %s, want %s", b.ID, b.Addr, want[b.ID])
		}
		if i > 0 && got[i-1].ID >= b.ID {
			t.Errorf("not by id: %d after %d", b.ID, got[i-1].ID)
		}
	}
}
