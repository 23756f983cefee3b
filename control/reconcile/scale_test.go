package reconcile

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// scaleVIPs is n VIPs of per backends each from a pool of pool addresses (VIP i takes pool
// members i*4 .. i*4+per-1, so every VIP has its own set and each address serves several VIPs).
func scaleVIPs(n, per, pool int) []VIP {
	out := make([]VIP, 0, n)
	for i := 0; i < n; i++ {
		v := vip(fmt.Sprintf("198.%d.%d.%d", 18+i/65536, i/256%256, i%256), 80)
		for j := 0; j < per; j++ {
			k := (i*4 + j) % pool
			v.Backends = append(v.Backends, be(fmt.Sprintf("10.%d.%d.%d", k/65536, k/256%256, k%256), 1, true))
		}
		out = append(out, v)
	}
	return out
}

// TestMaxVIPsRealMaps loads the forwarder in the kernel with max_vips 4096 and fills every VIP
// id (16 backends each): before vip_gens was sized from max_vips, the 65th VIP failed with
// "read vip generation 64: lookup: key does not exist". One VIP more is refused with the fix
// named. A restart over the pins (with ring signatures) builds no table.
func TestMaxVIPsRealMaps(t *testing.T) {
	testutil.RequireRoot(t)
	const maxVIPs, ring = 4096, 1021
	pin := filepath.Join("/sys/fs/bpf/switchyard/test", fmt.Sprintf("maxvips-%d", os.Getpid()))
	t.Cleanup(func() { _ = loader.Detach(pin) })
	opts := loader.Options{PinDir: pin, MaxVIPs: maxVIPs, RingSize: ring, MaxBackends: 16385, ConnTableSize: 1024}
	open := func() *maps.Set {
		f, err := loader.LoadForwarder(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		s, err := maps.New(&f.Objs.LBMaps, ring)
		if err != nil {
			t.Fatal(err)
		}
		sigs, err := loader.OpenRingSigs(opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sigs.Close() })
		if err := loader.TrustRingSigs(sigs, pin); err != nil {
			t.Fatal(err)
		}
		if err := s.UseRingSigs(sigs); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	r, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	vs := scaleVIPs(maxVIPs, 16, 16384)
	res, err := r.Apply(clone(vs))
	if err != nil {
		t.Fatalf("apply %d VIPs: %v", maxVIPs, err)
	}
	if res.VIPsAdded != maxVIPs || res.TablesBuilt != maxVIPs {
		t.Fatalf("apply: %+v, want %d VIPs added and built", res, maxVIPs)
	}
	got, _ := s.VIPs()
	if len(got) != maxVIPs || got[len(got)-1].ID != maxVIPs-1 {
		t.Fatalf("the map holds %d VIPs (last id %d), want %d", len(got), got[len(got)-1].ID, maxVIPs)
	}
	for _, i := range []int{0, 63, 64, 65, 1000, maxVIPs - 1} {
		checkRing(t, s, r, vs[i])
	}
	if _, err := r.Apply(append(clone(vs), scaleVIPs(maxVIPs+1, 1, 1)[maxVIPs])); err == nil {
		t.Fatalf("%d VIPs accepted in maps of %d", maxVIPs+1, maxVIPs)
	}

	s2 := open()
	r2, err := New(s2)
	if err != nil {
		t.Fatal(err)
	}
	res, err = r2.Apply(clone(vs))
	if err != nil || res.TablesBuilt != 0 || res.Changed() {
		t.Fatalf("restart: %+v %v, want nothing built or written", res, err)
	}
	vs[4000].Backends[3].InRing = false
	res, err = r2.Apply(clone(vs))
	if err != nil || res.TablesBuilt != 1 || res.RingsRebuilt != 1 {
		t.Fatalf("drain after restart: %+v %v, want one table", res, err)
	}
	checkRing(t, s2, r2, vs[4000])
}

// TestDrainDisruptionRealMaps: in the kernel's maps at ring 65537, draining (or a health check
// failing, the same input) one backend of a VIP of 1,000 moves at most 1.5x the ideal 1/N of
// its ring (a plain rebuild moved 7x), every moved slot is one the backend held, and no other
// VIP's ring is written; the undrain moves them back.
func TestDrainDisruptionRealMaps(t *testing.T) {
	testutil.RequireRoot(t)
	const ring, n = 65537, 1000
	f, err := loader.LoadForwarder(loader.Options{MaxVIPs: 4, RingSize: ring, MaxBackends: 2048, ConnTableSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s, err := maps.New(&f.Objs.LBMaps, ring)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	vs := append(scaleVIPs(1, n, n), scaleVIPs(2, 16, 2000)[1])
	if _, err := r.Apply(clone(vs)); err != nil {
		t.Fatal(err)
	}
	bigID, _ := r.VIPID(vs[0].Key)
	smallID, _ := r.VIPID(vs[1].Key)
	before, _ := s.Ring(bigID)
	small, _ := s.Ring(smallID)
	drained, _ := r.BackendID(vs[0].Backends[123].Addr)
	vs[0].Backends[123].InRing = false
	res, err := r.Apply(clone(vs))
	if err != nil {
		t.Fatal(err)
	}
	after, _ := s.Ring(bigID)
	moved := 0
	for i := range after {
		if after[i] != before[i] {
			moved++
			if before[i] != drained || after[i] == drained {
				t.Fatalf("slot %d moved from %d to %d: only the drained backend's (%d) slots may move", i, before[i], after[i], drained)
			}
		}
	}
	ideal := float64(ring) / n
	t.Logf("drain of 1 of %d backends in %d slots: %d slots moved, %.2fx the ideal", n, ring, moved, float64(moved)/ideal)
	if float64(moved) > 1.5*ideal || moved == 0 {
		t.Fatalf("drain moved %d slots, want at most 1.5x the ideal %.0f", moved, ideal)
	}
	if res.SlotsWritten != moved || res.RingsRebuilt != 1 || res.TablesBuilt != 1 {
		t.Fatalf("drain: %+v, want one table built and %d slots written", res, moved)
	}
	if got, _ := s.Ring(smallID); len(maglev.Diff(small, got)) != 0 {
		t.Fatal("the other VIP's ring changed")
	}
	vs[0].Backends[123].InRing = true
	if res, err = r.Apply(clone(vs)); err != nil {
		t.Fatal(err)
	}
	if back, _ := s.Ring(bigID); len(maglev.Diff(before, back)) != 0 || res.SlotsWritten != moved {
		t.Fatalf("undrain: %+v, want the %d slots back", res, moved)
	}
}
