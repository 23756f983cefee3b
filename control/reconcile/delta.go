package reconcile

import (
	"github.com/switchyard/switchyard/maps"
)

// SetStableInputs tells the reconciler that its caller never changes a VIP's Backends in place
// once it gave it to Apply: a VIP whose Backends slice is the same memory as in the last Apply,
// with the same key, flags and ring size, is then taken as unchanged without a look at its
// backends, and an Apply that changes a few VIPs (a drain, `vip add`) costs those VIPs and one
// pass over the list, not a map of every VIP (the daemon's desired state keeps each VIP's input
// until the VIP changes). Off by default.
func (r *Reconciler) SetStableInputs(on bool) {
	r.stable = on
	r.prev = nil
}

// keep remembers desired as the input of the last Apply (stable inputs only).
func (r *Reconciler) keep(desired []VIP) {
	if r.stable {
		r.prev = desired
	}
}

// deltaLimit is the most VIPs a delta Apply handles: past it the full Apply is as cheap.
const deltaLimit = 64

// applyDelta is Apply for an input that differs from the last one by a few VIPs changed, added
// or removed (stable inputs only, after an Apply that succeeded). done is false when the input
// is not of that shape: Apply then does the full pass, which also reports bad input.
func (r *Reconciler) applyDelta(desired []VIP) (res Result, done bool, err error) {
	if !r.stable || r.dirty || r.prev == nil || uint32(len(desired)) > r.m.MaxVIPs() {
		return res, false, nil
	}
	changed, added, gone, ok := diffInputs(r.prev, desired)
	if !ok || len(changed)+len(added)+len(gone) > deltaLimit {
		return res, false, nil
	}
	want := make(map[maps.VIPKey]*VIP, len(changed))
	goneSet := make(map[maps.VIPKey]bool, len(gone))
	for _, k := range gone {
		goneSet[k] = true
	}
	for n, j := range append(changed, added...) {
		v := &desired[j]
		v.Key.Addr = v.Key.Addr.Unmap()
		if _, dup := want[v.Key]; dup {
			return res, false, nil
		}
		if _, had := r.last[v.Key]; had && n >= len(changed) && !goneSet[v.Key] {
			return res, false, nil // a VIP added that is there already: the full pass refuses it
		}
		want[v.Key] = v
	}
	keys := make([]maps.VIPKey, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sortKeys(keys)
	r.dirty = true
	r.order = nil // the full pass sorts again
	r.slots.release()
	fresh, zeroed := r.countBackends(want, true, gone)
	if err := r.addBackends(fresh, &res); err != nil {
		return res, true, err
	}
	if err := r.removeVIPs(gone, &res); err != nil {
		return res, true, err
	}
	if err := r.putVIPs(keys, want, &res); err != nil {
		return res, true, err
	}
	if err := r.removeBackends(zeroed, &res); err != nil {
		return res, true, err
	}
	r.dirty = false
	r.keep(desired)
	r.deltas++
	return res, true, nil
}

// diffInputs compares the last input with the next, in list order: the indexes in next of the
// VIPs that changed and of those that came, and the keys of those that went. ok is false when
// the lists differ by more than isolated insertions, removals and changes (a reordering): then
// the full pass runs.
func diffInputs(prev, next []VIP) (changed, added []int, gone []maps.VIPKey, ok bool) {
	i, j := 0, 0
	for i < len(prev) || j < len(next) {
		switch {
		case i == len(prev):
			added = append(added, j)
			j++
		case j == len(next):
			gone = append(gone, unmapKey(prev[i].Key))
			i++
		case unmapKey(prev[i].Key) == unmapKey(next[j].Key):
			if !sameInput(&prev[i], &next[j]) {
				changed = append(changed, j)
			}
			i, j = i+1, j+1
		case j+1 < len(next) && unmapKey(prev[i].Key) == unmapKey(next[j+1].Key):
			added = append(added, j) // next[j] came
			j++
		case i+1 < len(prev) && unmapKey(prev[i+1].Key) == unmapKey(next[j].Key):
			gone = append(gone, unmapKey(prev[i].Key)) // prev[i] went
			i++
		default:
			return nil, nil, nil, false
		}
		if len(changed)+len(added)+len(gone) > deltaLimit {
			return nil, nil, nil, false
		}
	}
	return changed, added, gone, true
}

// sameInput reports whether two inputs of a VIP are the same: key, flags and ring size equal,
// and the backends the same memory (stable inputs: never changed in place).
func sameInput(a, b *VIP) bool {
	return a.Flags == b.Flags && a.RingSize == b.RingSize && len(a.Backends) == len(b.Backends) &&
		(len(a.Backends) == 0 || &a.Backends[0] == &b.Backends[0])
}

func unmapKey(k maps.VIPKey) maps.VIPKey {
	k.Addr = k.Addr.Unmap()
	return k
}
