package reconcile

import (
	"sort"

	"github.com/switchyard/switchyard/maps"
)

// slotAlloc places VIPs' rings in the ring maps: a first-fit allocator of slot ranges over
// [0, size). It keeps nothing of its own that the maps do not: New rebuilds it from the ranges
// the vips map names, so it survives a restart or an adopt. A freed range is held back until the
// next Apply (release): a packet that read the VIP's old entry just before the switch may still
// be reading that range, and must not find another VIP's table there.
type slotAlloc struct {
	size    uint32
	free    []maps.RingRange // disjoint, sorted by offset, never adjacent
	pending []maps.RingRange // freed during this Apply
}

// newSlotAlloc makes an allocator of size slots whose used ranges are used. Ranges that overlap
// an earlier one or leave the space are returned as bad (their VIPs need a new range).
func newSlotAlloc(size uint32, used map[uint32]maps.RingRange) (*slotAlloc, []uint32) {
	ids := make([]uint32, 0, len(used))
	for id := range used {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool {
		a, b := used[ids[i]], used[ids[j]]
		if a.Off != b.Off {
			return a.Off < b.Off
		}
		return ids[i] < ids[j]
	})
	a := &slotAlloc{size: size}
	var bad []uint32
	at := uint64(0)
	for _, id := range ids {
		r := used[id]
		if r.Size == 0 || uint64(r.Off) < at || r.End() > uint64(size) {
			bad = append(bad, id)
			continue
		}
		if uint64(r.Off) > at {
			a.free = append(a.free, maps.RingRange{Off: uint32(at), Size: r.Off - uint32(at)})
		}
		at = r.End()
	}
	if at < uint64(size) {
		a.free = append(a.free, maps.RingRange{Off: uint32(at), Size: size - uint32(at)})
	}
	return a, bad
}

// take returns a free range of n slots (the first that fits), false when none does.
func (a *slotAlloc) take(n uint32) (maps.RingRange, bool) {
	for i, f := range a.free {
		if f.Size < n {
			continue
		}
		r := maps.RingRange{Off: f.Off, Size: n}
		if f.Size == n {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = maps.RingRange{Off: f.Off + n, Size: f.Size - n}
		}
		return r, true
	}
	return maps.RingRange{}, false
}

// put frees a range at once: one never published in the vips map.
func (a *slotAlloc) put(r maps.RingRange) {
	if r.Size == 0 {
		return
	}
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].Off > r.Off })
	a.free = append(a.free, maps.RingRange{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = r
	// Merge with the next, then with the previous.
	if i+1 < len(a.free) && a.free[i].End() == uint64(a.free[i+1].Off) {
		a.free[i].Size += a.free[i+1].Size
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].End() == uint64(a.free[i].Off) {
		a.free[i-1].Size += a.free[i].Size
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}

// retire frees a range that a vips entry named until now, at the next release.
func (a *slotAlloc) retire(r maps.RingRange) {
	if r.Size != 0 {
		a.pending = append(a.pending, r)
	}
}

// release makes the ranges retired before free.
func (a *slotAlloc) release() {
	for _, r := range a.pending {
		a.put(r)
	}
	a.pending = a.pending[:0]
}

// freeSlots is the number of free slots (held-back ones not counted).
func (a *slotAlloc) freeSlots() uint64 {
	var n uint64
	for _, f := range a.free {
		n += uint64(f.Size)
	}
	return n
}
