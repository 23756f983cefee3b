package store

import (
	"iter"
	"sync"
	"unsafe"
)

// memTier is the memory tier: an index from a 64-bit key hash to pointer-free slots, each
// naming a record in the arena (arena.go), linked into the eviction policy's queues by slot
// index (eviction.go). Nothing per entry holds a Go pointer, so at a million entries the
// collector marks the arena's chunks, the slot array and the index's buckets, not a million
// header maps. Hash collisions chain slots through nextHash and are told apart by comparing the
// key bytes stored in the record.
//
// A lookup decodes the record into an Entry whose strings and body alias the arena (codec.go);
// the last few thousand decoded entries are kept in a small direct-mapped table, so a hot object
// is decoded once and keeps its memo (the edge's pre-rendered hit head) between hits.
//
// One mutex guards the tier. Lookups, inserts and evictions are O(1); compaction, amortised
// over the writes that made the dead bytes, copies a chunk's live records once and finds the
// sparsest chunk by a scan of the chunk list (the budget over the chunk size, a few thousand).
type memTier struct {
	mu      sync.Mutex
	s       *Store
	objects bool   // the capacity counts objects, not bytes
	cap     uint64 // the live weight the policy keeps (bytes: the budget less the arena's reserve)
	budget  uint64 // the configured byte budget (0 with an object budget)
	// allowance is the sealed chunks' dead bytes tolerated before compaction (bytes budget).
	allowance int64
	index     map[uint64]int32
	slots     []slot
	freeSlot  int32 // head of the free slot list (linked through next), -1 when empty
	n         int
	a         arena
	hot       []hotEntry
	pol       policy
	onEvict   func(*Meta) // for each entry evicted for room: its Meta when it has tags, else nil
	dropped   []*Meta     // evicted under the lock, for onEvict after it
	evicted   int
}

// slot is one resident entry: where its record is, and its state in the eviction policy.
type slot struct {
	hash       uint64
	weight     uint32 // the policy's weight: record bytes plus entryOverhead, or 1
	recLen     uint32
	keyLen     uint32
	metaLen    uint32
	off        uint32
	chunk      int32
	prev, next int32 // the policy queue (or the free list)
	nextHash   int32 // the next slot with the same index bucket
	gen        uint32
	queue      uint8 // qFree when unused
	freq       uint8 // s3fifo: hits since insertion or the last pass, capped at 3
	tagged     bool
	// The entry's head record (its pre-rendered response head), when one was set.
	headChunk int32
	headOff   uint32
	headLen   uint32 // 0: none
}

type hotEntry struct {
	slot int32
	gen  uint32
	e    *Entry
}

const (
	// entryOverhead is what an entry costs outside its record: its slot (64 bytes), its index
	// bucket (about 16 bytes at the map's load), the growth slack of both (up to 2x before
	// the next doubling) and its share of the eviction sketch.
	entryOverhead = 160
	hotEntries    = 4096
	maxChunk      = 1 << 20
)

func newMemTier(s *Store, policy string, objects int, budget int64, onEvict func(*Meta)) *memTier {
	t := &memTier{s: s, index: map[uint64]int32{}, freeSlot: -1, hot: make([]hotEntry, hotEntries), onEvict: onEvict}
	for i := range t.hot {
		t.hot[i].slot = -1
	}
	if objects > 0 {
		t.objects, t.cap = true, uint64(objects)
		t.a = newArena(maxChunk)
	} else {
		// Chunks of 1/64 of the budget (256 B to 1 MiB); a tenth of the budget is left for dead
		// bytes awaiting compaction and one chunk for the current one's tail, so what the tier
		// holds (Bytes) stays within the budget.
		cs := min(max(int(budget/64), 256), maxChunk)
		t.a = newArena(cs)
		t.budget, t.allowance = uint64(budget), budget/10
		t.cap = uint64(max(budget-t.allowance-int64(cs), 0))
	}
	t.pol = newPolicy(policy, t.cap, t.objects)
	return t
}

func (t *memTier) weigh(recLen int) uint32 {
	if t.objects {
		return 1
	}
	return uint32(min(recLen+entryOverhead, 1<<32-1))
}

// rec returns slot i's key, encoded Meta and body; all alias the arena.
func (t *memTier) rec(i int32) (key string, meta, body []byte) {
	sl := &t.slots[i]
	r := t.a.chunks[sl.chunk].buf[int(sl.off)+recHeader : int(sl.off)+int(sl.recLen)]
	return unsafe.String(unsafe.SliceData(r), int(sl.keyLen)), r[sl.keyLen : sl.keyLen+sl.metaLen], r[sl.keyLen+sl.metaLen:]
}

// find returns the slot holding key, or -1.
func (t *memTier) find(h uint64, key string) int32 {
	i, ok := t.index[h]
	for ok && i >= 0 {
		if k, _, _ := t.rec(i); t.slots[i].hash == h && k == key {
			return i
		}
		i = t.slots[i].nextHash
	}
	return -1
}

// entry returns slot i's decoded entry, from the hot table or the arena.
func (t *memTier) entry(i int32) *Entry {
	sl := &t.slots[i]
	h := &t.hot[int(i)&(hotEntries-1)]
	if h.slot == i && h.gen == sl.gen {
		return h.e
	}
	key, meta, body := t.rec(i)
	e, err := t.s.decodeEntry(key, meta, body)
	if err != nil {
		return nil
	}
	e.tier, e.slot, e.gen = t, i, sl.gen
	if sl.headLen > 0 {
		b := t.a.chunks[sl.headChunk].buf[int(sl.headOff)+recHeader : int(sl.headOff)+int(sl.headLen)]
		e.head = b[:len(b):len(b)]
	}
	*h = hotEntry{slot: i, gen: sl.gen, e: e}
	return e
}

// forget clears slot i from the hot table (its record moved or died).
func (t *memTier) forget(i int32) {
	if h := &t.hot[int(i)&(hotEntries-1)]; h.slot == i {
		*h = hotEntry{slot: -1}
	}
}

// GetIfPresent returns key's entry, counting the hit for eviction.
func (t *memTier) GetIfPresent(key string) (*Entry, bool) {
	h := t.s.hash(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.find(h, key)
	t.pol.lookup(t, i >= 0)
	if i < 0 {
		return nil, false
	}
	t.pol.hit(t, i)
	e := t.entry(i)
	return e, e != nil
}

// Contains reports whether key is resident, without decoding its entry.
func (t *memTier) Contains(key string) bool {
	h := t.s.hash(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.find(h, key) >= 0
}

// Peek returns key's entry without counting a hit.
func (t *memTier) Peek(key string) (*Entry, bool) {
	h := t.s.hash(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	i := t.find(h, key)
	if i < 0 {
		return nil, false
	}
	e := t.entry(i)
	return e, e != nil
}

var metaBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// Set stores e under key and evicts until the tier is within its capacity; an entry heavier
// than the whole capacity is not stored (and replaces nothing: the old one is dropped).
// Evicted entries are reported to onEvict after the lock is released (the store's callback
// looks entries up again).
func (t *memTier) Set(key string, e *Entry) {
	bp := metaBufs.Get().(*[]byte)
	meta := appendMeta((*bp)[:0], e.Meta)
	h := t.s.hash(key)
	t.mu.Lock()
	t.set(h, key, meta, e)
	dropped := t.dropped
	t.dropped = nil
	t.mu.Unlock()
	*bp = meta
	metaBufs.Put(bp)
	for _, m := range dropped {
		if t.onEvict != nil {
			t.onEvict(m)
		}
	}
}

func (t *memTier) set(h uint64, key string, meta []byte, e *Entry) {
	recLen := recHeader + len(key) + len(meta) + len(e.Body)
	w := t.weigh(recLen)
	i := t.find(h, key)
	if uint64(w) > t.cap || recLen >= headRecord { // a record's length must fit its header
		if i >= 0 {
			t.remove(i, false)
		}
		return
	}
	if i >= 0 { // a replacement keeps the policy's state
		sl := &t.slots[i]
		t.a.release(sl.chunk, int(sl.recLen))
		t.releaseHead(i)
		t.forget(i)
		sl.gen++
		t.place(i, key, meta, e.Body)
		t.pol.replaced(t, i, w)
	} else {
		i = t.newSlot(h)
		t.place(i, key, meta, e.Body)
		t.slots[i].weight = w
		t.n++
		t.pol.insert(t, i)
	}
	t.slots[i].tagged = len(e.Meta.Tags) > 0
	t.pol.evict(t)
	t.clean()
}

// place writes slot i's record into the arena.
func (t *memTier) place(i int32, key string, meta, body []byte) {
	sl := &t.slots[i]
	ci, off, n := t.a.put(0, i, sl.gen, key, meta, body)
	sl.chunk, sl.off, sl.recLen = ci, uint32(off), uint32(n)
	sl.keyLen, sl.metaLen = uint32(len(key)), uint32(len(meta))
}

// releaseHead frees slot i's head record, if it has one, and takes its bytes off the weight.
func (t *memTier) releaseHead(i int32) {
	sl := &t.slots[i]
	if sl.headLen == 0 {
		return
	}
	t.a.release(sl.headChunk, int(sl.headLen))
	if !t.objects && sl.queue != qFree {
		t.pol.q[sl.queue].weight -= uint64(sl.headLen)
		sl.weight -= sl.headLen
	}
	sl.headLen = 0
}

// setHead stores head as the head record of slot i if it still holds generation gen (the entry
// the head was rendered from), counting its bytes in the entry's weight.
func (t *memTier) setHead(i int32, gen uint32, head []byte) {
	t.mu.Lock()
	defer func() {
		dropped := t.dropped
		t.dropped = nil
		t.mu.Unlock()
		for _, m := range dropped {
			if t.onEvict != nil {
				t.onEvict(m)
			}
		}
	}()
	if i < 0 || int(i) >= len(t.slots) {
		return
	}
	sl := &t.slots[i]
	if sl.queue == qFree || sl.gen != gen || sl.headLen > 0 {
		return
	}
	ci, off, n := t.a.put(headRecord, i, gen, "", nil, head)
	sl.headChunk, sl.headOff, sl.headLen = ci, uint32(off), uint32(n)
	if !t.objects {
		sl.weight += uint32(n)
		t.pol.q[sl.queue].weight += uint64(n)
	}
	t.forget(i) // the next lookup decodes the entry with its head
	t.pol.evict(t)
	t.clean()
}

// newSlot takes a free slot for hash h and links it into the index.
func (t *memTier) newSlot(h uint64) int32 {
	var i int32
	if t.freeSlot >= 0 {
		i = t.freeSlot
		t.freeSlot = t.slots[i].next
		gen := t.slots[i].gen
		t.slots[i] = slot{gen: gen}
	} else {
		t.slots = append(t.slots, slot{})
		i = int32(len(t.slots) - 1)
	}
	sl := &t.slots[i]
	sl.hash, sl.prev, sl.next, sl.nextHash = h, -1, -1, -1
	if head, ok := t.index[h]; ok {
		sl.nextHash = head
	}
	t.index[h] = i
	return i
}

// remove frees slot i; evicted says it went for room (reported to onEvict).
func (t *memTier) remove(i int32, evicted bool) {
	sl := &t.slots[i]
	if evicted {
		t.evicted++
		var m *Meta
		if sl.tagged {
			key, meta, _ := t.rec(i)
			m = &Meta{}
			if t.s.decodeMeta(m, key, meta, nil, nil) != nil {
				m = nil
			}
		}
		t.dropped = append(t.dropped, m)
	}
	t.releaseHead(i) // first: it takes the head's bytes off the queue's weight
	t.pol.unlink(t, i)
	if head := t.index[sl.hash]; head == i {
		if sl.nextHash >= 0 {
			t.index[sl.hash] = sl.nextHash
		} else {
			delete(t.index, sl.hash)
		}
	} else {
		for p := head; p >= 0; p = t.slots[p].nextHash {
			if t.slots[p].nextHash == i {
				t.slots[p].nextHash = sl.nextHash
				break
			}
		}
	}
	t.a.release(sl.chunk, int(sl.recLen))
	t.forget(i)
	sl.gen++
	sl.queue = qFree
	sl.next = t.freeSlot
	t.freeSlot = i
	t.n--
}

// clean compacts the sparsest sealed chunks while their dead bytes exceed the allowance (an
// object budget allows an eighth of the live bytes), down to three quarters of it.
func (t *memTier) clean() {
	allow := t.allowance
	if t.objects {
		allow = max(t.a.live/8, 4*int64(t.a.chunkSize))
	}
	if t.a.sealedDead() <= allow {
		return
	}
	// Each pass frees the sparsest chunk's dead bytes; it stops when a pass gains nothing (a
	// chunk sealed by the moves themselves adds its unused tail).
	for dead := t.a.sealedDead(); dead > allow*3/4; {
		ci := t.a.sparsest()
		if ci < 0 {
			return
		}
		t.a.compact(ci, func(head bool, s int32, gen uint32, off int) bool {
			if s < 0 || int(s) >= len(t.slots) {
				return false
			}
			sl := &t.slots[s]
			if head {
				return sl.queue != qFree && sl.gen == gen && sl.headLen > 0 && sl.headChunk == ci && int(sl.headOff) == off
			}
			return sl.queue != qFree && sl.gen == gen && sl.chunk == ci && int(sl.off) == off
		}, func(head bool, s, to int32, off int) {
			if head {
				t.slots[s].headChunk, t.slots[s].headOff = to, uint32(off)
			} else {
				t.slots[s].chunk, t.slots[s].off = to, uint32(off)
			}
			t.forget(s)
		})
		now := t.a.sealedDead()
		if now >= dead {
			return
		}
		dead = now
	}
}

// Invalidate removes key.
func (t *memTier) Invalidate(key string) {
	h := t.s.hash(key)
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := t.find(h, key); i >= 0 {
		t.remove(i, false)
		t.clean()
	}
}

// keysWithHash returns the resident keys whose hash is h (one, but for a collision).
func (t *memTier) keysWithHash(h uint64) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	i, ok := t.index[h]
	for ok && i >= 0 {
		if t.slots[i].hash == h {
			k, _, _ := t.rec(i)
			out = append(out, k)
		}
		i = t.slots[i].nextHash
	}
	return out
}

// All yields the resident entries (those still resident when their turn comes).
func (t *memTier) All() iter.Seq2[string, *Entry] {
	type ref struct {
		i   int32
		gen uint32
	}
	t.mu.Lock()
	snap := make([]ref, 0, t.n)
	for i := range t.slots {
		if t.slots[i].queue != qFree {
			snap = append(snap, ref{int32(i), t.slots[i].gen})
		}
	}
	t.mu.Unlock()
	return func(yield func(string, *Entry) bool) {
		for _, r := range snap {
			t.mu.Lock()
			var e *Entry
			if sl := &t.slots[r.i]; sl.queue != qFree && sl.gen == r.gen {
				e = t.entry(r.i)
			}
			t.mu.Unlock()
			if e != nil && !yield(e.Meta.Key, e) {
				return
			}
		}
	}
}

// EstimatedSize returns the number of resident entries.
func (t *memTier) EstimatedSize() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// IsWeighted reports whether the budget is in bytes.
func (t *memTier) IsWeighted() bool { return !t.objects }

// WeightedSize returns the bytes the tier holds: its arena chunks (live records, dead ones
// awaiting compaction and the current chunk's tail) and each entry's overhead.
func (t *memTier) WeightedSize() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return uint64(t.a.held) + uint64(t.n)*entryOverhead
}
