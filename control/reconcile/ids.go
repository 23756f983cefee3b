package reconcile

// idSet hands out the lowest free id of a range in amortized O(1): low is a lower bound of the
// free ids, so a burst of allocations (a cold start with thousands of backends) scans the range
// once instead of once per id.
type idSet struct {
	used  []bool
	first uint32 // the lowest id of the range
	low   uint32 // no id below low is free
}

func newIDSet(first, end uint32) idSet {
	if end < first {
		end = first
	}
	return idSet{used: make([]bool, end), first: first, low: first}
}

func (s *idSet) add(id uint32) {
	if id < uint32(len(s.used)) && !s.used[id] {
		s.used[id] = true
	}
}

func (s *idSet) remove(id uint32) {
	if id < uint32(len(s.used)) && s.used[id] {
		s.used[id] = false
		if id < s.low {
			s.low = id
		}
	}
}

// free returns the lowest free id (not taken: add takes it), false when every id is used.
func (s *idSet) free() (uint32, bool) {
	for s.low < uint32(len(s.used)) && s.used[s.low] {
		s.low++
	}
	if s.low >= uint32(len(s.used)) {
		return 0, false
	}
	return s.low, true
}
