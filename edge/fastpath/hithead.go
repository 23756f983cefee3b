package fastpath

import (
	"encoding/binary"
	"unsafe"

	"github.com/switchyard/switchyard/edge/store"
)

// A hit head is rendered once per stored entry and kept with it in the memory tier's arena
// (store.Entry.SetHead), not only as the memo of one decoded view: at a million entries most
// hits find an entry whose view is not among the tier's recently decoded ones, and rendering
// the head again (sorting and writing the header) would cost every such hit several
// allocations. The stored form is one flags byte (served, date), the lengths and bytes of pre
// and post, then the sniffed type; a decoded head's slices alias the arena, which never reuses
// bytes anyone can still reach.

const (
	headServed = 1 << iota
	headDate
)

// storedHitHead returns ent's hit head from its stored form, or renders and stores it; an entry
// the fast path does not serve gets an empty head (pre nil), remembered the same way.
func (fs *Server) storedHitHead(ent *store.Entry) *hitHead {
	if b := ent.Head(); b != nil {
		if hh, ok := decodeHitHead(b); ok {
			return hh
		}
	}
	hh := fs.renderHitHead(ent)
	if hh == nil {
		hh = &hitHead{} // remembered as "not served here"
	}
	ent.SetHead(encodeHitHead(hh))
	return hh
}

func encodeHitHead(hh *hitHead) []byte {
	var flags byte
	if hh.pre != nil {
		flags |= headServed
	}
	if hh.date {
		flags |= headDate
	}
	b := make([]byte, 0, 1+2*binary.MaxVarintLen32+len(hh.pre)+len(hh.post)+len(hh.sniffed))
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(hh.pre)))
	b = append(b, hh.pre...)
	b = binary.AppendUvarint(b, uint64(len(hh.post)))
	b = append(b, hh.post...)
	return append(b, hh.sniffed...)
}

func decodeHitHead(b []byte) (*hitHead, bool) {
	if len(b) == 0 {
		return nil, false
	}
	flags, rest := b[0], b[1:]
	hh := &hitHead{date: flags&headDate != 0}
	if flags&headServed == 0 {
		return hh, true
	}
	part := func() []byte {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			rest = nil
			return nil
		}
		p := rest[k : k+int(n) : k+int(n)] // capped: an append copies, never writes the arena
		rest = rest[k+int(n):]
		return p
	}
	hh.pre = part()
	hh.post = part()
	if hh.pre == nil || rest == nil {
		return nil, false
	}
	if len(rest) > 0 {
		hh.sniffed = unsafe.String(&rest[0], len(rest))
	}
	return hh, true
}
