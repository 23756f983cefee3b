package zone

import "iter"

// index maps a zone's lowercased owner names to their node's offset in its data, or to
// entMark for an empty non-terminal. A zone of a few names keeps them in a slice searched in
// order: the smallest Go map takes about 250 bytes, which was the largest part of what a small
// zone costs above its records (100,000 zones of four names each, as DNS hosters run them).
type index struct {
	few []indexEntry      // up to indexFew names, while m is nil
	m   map[string]uint32 // every name, once there are more
}

type indexEntry struct {
	name string
	off  uint32
}

// indexFew is the most names kept in the slice; a search of eight strings, most of which differ
// in length, costs no more than a map's hash.
const indexFew = 8

// newIndex returns an index sized for n names.
func newIndex(n int) index {
	if n > indexFew {
		return index{m: make(map[string]uint32, n)}
	}
	return index{few: make([]indexEntry, 0, n)}
}

func (x *index) get(name string) (uint32, bool) {
	if x.m != nil {
		off, ok := x.m[name]
		return off, ok
	}
	for _, e := range x.few {
		if e.name == name {
			return e.off, true
		}
	}
	return 0, false
}

// set adds or replaces name; the slice becomes a map when it outgrows indexFew.
func (x *index) set(name string, off uint32) {
	if x.m != nil {
		x.m[name] = off
		return
	}
	for i := range x.few {
		if x.few[i].name == name {
			x.few[i].off = off
			return
		}
	}
	if len(x.few) < indexFew {
		x.few = append(x.few, indexEntry{name, off})
		return
	}
	x.m = make(map[string]uint32, 2*indexFew)
	for _, e := range x.few {
		x.m[e.name] = e.off
	}
	x.m[name], x.few = off, nil
}

func (x *index) len() int {
	if x.m != nil {
		return len(x.m)
	}
	return len(x.few)
}

// all yields every name and offset, in no particular order; the index must not change meanwhile.
func (x *index) all() iter.Seq2[string, uint32] {
	return func(yield func(string, uint32) bool) {
		if x.m != nil {
			for name, off := range x.m {
				if !yield(name, off) {
					return
				}
			}
			return
		}
		for _, e := range x.few {
			if !yield(e.name, e.off) {
				return
			}
		}
	}
}
