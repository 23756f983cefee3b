package store

import "encoding/binary"

// The arena holds the memory tier's records (key, encoded Meta, body) in large []byte chunks, so
// the collector sees a few thousand pointer-free buffers instead of a million entries with
// header maps. It is log-structured: a record is appended to the current chunk and its bytes are
// never written again. A freed record leaves dead bytes in its chunk; when the dead bytes of the
// sealed chunks pass the allowance, the sparsest chunk is compacted: its live records are copied
// into a new buffer of their exact size and the old buffer is dropped. A reader that still holds
// a slice of a freed or moved record keeps the old buffer alive through the Go heap, so a freed
// record's bytes are never handed to a new object while anyone can still read them (no reference
// counts to forget: the collector is the reference count, and it only has to mark the chunks).
//
// A record bigger than a quarter of a chunk gets a chunk of its own, dropped as soon as the
// record dies.

// recHeader is a record's header in its chunk: its length (the top bit set for a head record,
// an entry's pre-rendered response head, kept apart so it can be added on first use), its slot
// and the slot's generation, so compaction can walk a chunk and tell live records from dead ones.
const recHeader = 12

const headRecord = 1 << 31

// chunk is one arena buffer.
type chunk struct {
	buf  []byte // nil for a free chunk index
	used int    // bytes appended
	live int    // bytes of live records
}

// arena is the chunk list; the memory tier's lock guards it.
type arena struct {
	chunkSize int
	chunks    []chunk
	free      []int32 // indexes of dropped chunks, for reuse
	cur       int32   // the chunk appended to, -1 before the first
	held      int64   // Σ len(buf)
	live      int64   // Σ live
	curDead   int64   // dead bytes of the current chunk (not compactable until sealed)
	compacted int     // chunks compacted so far
}

func newArena(chunkSize int) arena { return arena{chunkSize: chunkSize, cur: -1} }

// sealedDead is the dead bytes of the sealed chunks, what compaction can reclaim.
func (a *arena) sealedDead() int64 {
	d := a.held - a.live - a.curDead
	if a.cur >= 0 {
		c := &a.chunks[a.cur]
		d -= int64(len(c.buf) - c.used) // the current chunk's unused tail is not dead
	}
	return d
}

func (a *arena) newChunk(size int) int32 {
	c := chunk{buf: make([]byte, size)}
	a.held += int64(size)
	if n := len(a.free); n > 0 {
		i := a.free[n-1]
		a.free = a.free[:n-1]
		a.chunks[i] = c
		return i
	}
	a.chunks = append(a.chunks, c)
	return int32(len(a.chunks) - 1)
}

// alloc reserves n bytes and returns their chunk and offset.
func (a *arena) alloc(n int) (int32, int) {
	if n > a.chunkSize/4 {
		return a.newChunk(n), 0
	}
	if a.cur < 0 || len(a.chunks[a.cur].buf)-a.chunks[a.cur].used < n {
		if a.cur >= 0 {
			a.seal()
		}
		a.cur = a.newChunk(a.chunkSize)
	}
	c := &a.chunks[a.cur]
	off := c.used
	c.used += n
	return a.cur, off
}

// seal stops appending to the current chunk; a chunk sealed empty is dropped.
func (a *arena) seal() {
	i := a.cur
	a.cur, a.curDead = -1, 0
	if a.chunks[i].live == 0 {
		a.drop(i)
	}
}

// put appends a record for slot i (generation gen) and returns where it is; kind is 0 or
// headRecord.
func (a *arena) put(kind uint32, i int32, gen uint32, key string, meta, body []byte) (int32, int, int) {
	n := recHeader + len(key) + len(meta) + len(body)
	ci, off := a.alloc(n)
	rec := a.chunks[ci].buf[off : off+n]
	binary.LittleEndian.PutUint32(rec[0:], uint32(n)|kind)
	binary.LittleEndian.PutUint32(rec[4:], uint32(i))
	binary.LittleEndian.PutUint32(rec[8:], gen)
	p := recHeader
	p += copy(rec[p:], key)
	p += copy(rec[p:], meta)
	copy(rec[p:], body)
	a.chunks[ci].live += n
	a.live += int64(n)
	return ci, off, n
}

// release marks n bytes of chunk ci dead, dropping a dedicated or sealed chunk left empty.
func (a *arena) release(ci int32, n int) {
	c := &a.chunks[ci]
	c.live -= n
	a.live -= int64(n)
	switch {
	case ci == a.cur:
		a.curDead += int64(n) // never rewound: a reader may still hold the dead bytes
	case c.live == 0:
		a.drop(ci)
	}
}

func (a *arena) drop(ci int32) {
	a.held -= int64(len(a.chunks[ci].buf))
	a.chunks[ci] = chunk{}
	a.free = append(a.free, ci)
}

// sparsest returns the sealed chunk with the most dead bytes, or -1.
func (a *arena) sparsest() int32 {
	best, most := int32(-1), 0
	for i := range a.chunks {
		c := &a.chunks[i]
		if int32(i) == a.cur || c.buf == nil {
			continue
		}
		if d := len(c.buf) - c.live; d > most {
			best, most = int32(i), d
		}
	}
	return best
}

// compact moves chunk ci's live records to the end of the arena (the current chunk) and drops
// ci. live(head, slot, gen, off) tells whether the record at off is live; moved(head, slot,
// chunk, off) is told where a live one went. The old buffer is left to readers that still hold
// parts of it.
func (a *arena) compact(ci int32, live func(head bool, slot int32, gen uint32, off int) bool, moved func(head bool, slot, chunk int32, off int)) {
	a.compacted++
	old := a.chunks[ci].buf
	used := a.chunks[ci].used
	for off := 0; off+recHeader <= used; {
		word := binary.LittleEndian.Uint32(old[off:])
		head, n := word&headRecord != 0, int(word&^headRecord)
		if n < recHeader {
			break // never written: the rest of the chunk is empty
		}
		slot := int32(binary.LittleEndian.Uint32(old[off+4:]))
		gen := binary.LittleEndian.Uint32(old[off+8:])
		if live(head, slot, gen, off) {
			to, at := a.alloc(n)
			copy(a.chunks[to].buf[at:at+n], old[off:off+n])
			a.chunks[to].live += n
			a.chunks[ci].live -= n
			moved(head, slot, to, at)
		}
		off += n
	}
	a.drop(ci)
}
