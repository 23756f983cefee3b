package store

import "unsafe"

// The memory tier's budget counts what an entry really holds, not its body alone: at 1 KB
// bodies the header map, the parsed directives, the tags, the pre-rendered hit head and the
// structures around them weigh as much as the body again (a flat 512 bytes per entry let a
// 256 MiB budget reach about 0.9 GiB of RSS). The figures are Go's layout on 64-bit: a string
// header is 16 bytes, a slice header 24, a map slot the key and value headers plus a control
// byte, and every allocation is rounded up to its size class (about 1/8 on average).
const (
	// entryFixed is the Entry and Meta structs, the otter node, the header and directives
	// maps' own structures and the hit head's struct.
	entryFixed = 480
	// fieldWeight is one header field's map slot, its []string and its string header.
	fieldWeight = 64
	// directiveWeight is one parsed cache directive's map slot and strings.
	directiveWeight = 48
)

// entryWeight is the bytes an entry holds in the memory tier (its weight in the budget).
func entryWeight(e *Entry) uint32 {
	w := entryFixed + cap(e.Body)
	if m := e.Meta; m != nil {
		w += len(m.Key) + len(m.File)
		if unsafe.StringData(m.Primary) != unsafe.StringData(m.Key) {
			w += len(m.Primary)
		}
		head := 0 // the header's bytes, held once in the map and once in the rendered hit head
		for k, vv := range m.Header {
			w += fieldWeight
			for _, v := range vv {
				w += 16
				head += len(k) + len(v) + 4
			}
		}
		w += 2 * head
		for k, v := range m.Directives {
			w += directiveWeight + len(k) + len(v)
		}
		w += 16 * (len(m.Tags) + len(m.Vary))
	}
	w += w / 8 // size-class rounding
	if w > 1<<32-1 {
		return 1<<32 - 1
	}
	return uint32(w)
}
