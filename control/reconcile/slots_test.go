package reconcile

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/maps"
)

// TestRingSizesPerVIP: VIPs of different ring sizes share the ring maps without overlapping; a
// size change moves the VIP to a new range (written whole, previous ring empty) and frees the
// old one after the Apply; a restarted reconciler rebuilds the allocator from the vips map and
// builds nothing; a space too small is refused with the fix, and loses no state.
func TestRingSizesPerVIP(t *testing.T) {
	m := &sigMaps{memMaps: newMem(), sigs: map[uint32]uint64{}}
	m.slots = 101 + 211 + 307
	r, _ := New(m)
	a := vip("198.18.100.1", 80, be("198.18.3.1", 1, true), be("198.18.3.2", 1, true))
	b := vip("198.18.100.2", 80, be("198.18.3.3", 1, true))
	a.RingSize, b.RingSize = 101, 211
	if _, err := r.Apply(clone([]VIP{a, b})); err != nil {
		t.Fatal(err)
	}
	checkRing(t, m, r, a)
	checkRing(t, m, r, b)
	ida, _ := r.VIPID(a.Key)
	ra, _ := r.RingRange(ida)
	idb, _ := r.VIPID(b.Key)
	rb, _ := r.RingRange(idb)
	if ra.Size != 101 || rb.Size != 211 || (ra.Off < rb.Off && ra.End() > uint64(rb.Off)) || (rb.Off < ra.Off && rb.End() > uint64(ra.Off)) {
		t.Fatalf("ranges %+v and %+v: want sizes 101 and 211, disjoint", ra, rb)
	}
	// Grow a: a new range of 307 (the only space left), written whole, previous ring empty.
	a.RingSize = 307
	res, err := r.Apply(clone([]VIP{a, b}))
	if err != nil || res.TablesBuilt != 1 || res.VIPsUpdated != 1 {
		t.Fatalf("resize: %+v %v, want one table and the entry rewritten", res, err)
	}
	checkRing(t, m, r, a)
	checkRing(t, m, r, b)
	na, _ := r.RingRange(ida)
	if na.Size != 307 || na.Off == ra.Off {
		t.Fatalf("resized range %+v, want 307 slots elsewhere than %+v", na, ra)
	}
	if prev, _ := r.PrevRing(ida); !isZero(prev) {
		t.Fatal("a ring placed anew has a previous table of another size")
	}
	// A restart reads the ranges back: nothing built, and the old range of a is free again.
	r2, _ := New(m)
	if res, err := r2.Apply(clone([]VIP{a, b})); err != nil || res.TablesBuilt != 0 || res.Changed() {
		t.Fatalf("restart: %+v %v, want nothing built or written", res, err)
	}
	c := vip("198.18.100.3", 80, be("198.18.3.4", 1, true))
	c.RingSize = 101
	if _, err := r2.Apply(clone([]VIP{a, b, c})); err != nil {
		t.Fatalf("a VIP in the range a left: %v", err)
	}
	checkRing(t, m, r2, c)
	// No space left: refused, naming ring_slots; the running VIPs keep their rings.
	d := vip("198.18.100.4", 80, be("198.18.3.5", 1, true))
	d.RingSize = 101
	_, err = r2.Apply(clone([]VIP{a, b, c, d}))
	if err == nil || !strings.Contains(err.Error(), "raise ring_slots") {
		t.Fatalf("full ring maps: %v, want an error naming ring_slots", err)
	}
	if _, err := r2.Apply(clone([]VIP{a, b, c})); err != nil {
		t.Fatal(err)
	}
	for _, v := range []VIP{a, b, c} {
		checkRing(t, m, r2, v)
	}
}

// TestSlotAlloc: first fit, merging of freed neighbours, held-back ranges until release, and
// ranges read back that overlap reported bad.
func TestSlotAlloc(t *testing.T) {
	a, bad := newSlotAlloc(100, map[uint32]maps.RingRange{1: {Off: 10, Size: 20}, 2: {Off: 25, Size: 5}, 3: {Off: 50, Size: 10}})
	if len(bad) != 1 || bad[0] != 2 {
		t.Fatalf("bad ranges %v, want [2] (overlaps 1)", bad)
	}
	if a.freeSlots() != 70 {
		t.Fatalf("free %d, want 70", a.freeSlots())
	}
	r, ok := a.take(15)
	if !ok || r.Off != 30 {
		t.Fatalf("take 15: %+v %v, want at 30 (0..10 too small)", r, ok)
	}
	a.retire(maps.RingRange{Off: 10, Size: 20})
	if _, ok := a.take(60); ok {
		t.Fatal("a retired range was given before release")
	}
	a.release()
	a.put(r)
	if r, ok := a.take(50); !ok || r.Off != 0 {
		t.Fatalf("take 50 after freeing 10..45: %+v %v, want at 0 (merged)", r, ok)
	}
}
