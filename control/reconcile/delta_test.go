package reconcile

import (
	"slices"
	"testing"
)

// TestDeltaApplyMatchesFull: with stable inputs, Applies that drain, add, remove and re-flag a
// few VIPs (each changed VIP a new Backends slice, the others the same memory) write the same
// maps and report the same results as a reconciler doing the full pass; a VIP added twice is
// still refused.
func TestDeltaApplyMatchesFull(t *testing.T) {
	full, delta := newMem(), newMem()
	full.maxV, full.maxB, delta.maxV, delta.maxB = 64, 256, 64, 256
	rf, _ := New(full)
	rd, _ := New(delta)
	rd.SetStableInputs(true)
	vs := manyVIPs(40)
	apply := func(what string, in []VIP) {
		t.Helper()
		a, errA := rf.Apply(clone(in))
		b, errB := rd.Apply(slices.Clone(in)) // the same Backends memory for unchanged VIPs
		if (errA == nil) != (errB == nil) || a != b {
			t.Fatalf("%s: full %+v %v, delta %+v %v", what, a, errA, b, errB)
		}
		for _, v := range in {
			checkRing(t, delta, rd, v)
			ia, _ := rf.VIPID(v.Key)
			ib, _ := rd.VIPID(v.Key)
			ga, _ := full.Ring(ia)
			gb, _ := delta.Ring(ib)
			if !slices.Equal(ga, gb) {
				t.Fatalf("%s: vip %s rings differ", what, v.Key)
			}
		}
	}
	apply("first", vs)
	apply("same", vs)
	own := func(i int) { vs[i].Backends = slices.Clone(vs[i].Backends) } // what a change does
	own(7)
	vs[7].Backends[1].InRing = false
	apply("drain", vs)
	own(7)
	vs[7].Backends[1].InRing = true
	apply("undrain", vs)
	vs = append(vs, vip("198.18.200.1", 443, be("10.9.0.1", 1, true), be("10.9.0.2", 1, true)))
	apply("vip add", vs)
	vs = append(vs[:12], vs[13:]...)
	apply("vip remove", vs)
	vs[3].Flags = 1
	apply("flags", vs)
	vs[5].RingSize = 211
	apply("ring size", vs)
	dup := append(slices.Clone(vs), vs[9])
	if _, err := rd.Apply(dup); err == nil {
		t.Fatal("a VIP given twice was accepted by a delta Apply")
	}
	apply("after a refused input", vs)
	if rd.deltas < 7 {
		t.Fatalf("%d delta Applies, want the 7 changes of a few VIPs done so", rd.deltas)
	}
}
