package store

import "fmt"

// Eviction policies of the memory tier (memory.eviction).
const (
	// EvictTinyLFU is W-TinyLFU: a small LRU window, then a segmented LRU main space whose
	// admission compares access frequencies (a count-min sketch). Scan-resistant. The default.
	EvictTinyLFU = "tinylfu"
	// EvictLRU is strict least-recently-used: every hit moves the entry to the front.
	EvictLRU = "lru"
	// EvictS3FIFO is S3-FIFO (Yang et al., SOSP 2023): a small FIFO that drops one-hit wonders,
	// a main FIFO with reinsertion, and a ghost queue of recently dropped keys.
	EvictS3FIFO = "s3fifo"
)

// CheckEviction reports whether name is a memory eviction policy ("" means the default).
func CheckEviction(name string) error {
	switch name {
	case "", EvictTinyLFU, EvictLRU, EvictS3FIFO:
		return nil
	}
	return fmt.Errorf("%q is not an eviction policy; use tinylfu, lru or s3fifo", name)
}

// Queues a slot can be in. lru uses qA only; s3fifo qA (small) and qB (main); tinylfu qA
// (window), qB (probation) and qC (protected).
const (
	qFree uint8 = iota
	qA
	qB
	qC
)

// queue is an intrusive doubly linked list of slot indexes: push at the head, take the tail.
type queue struct {
	head, tail int32
	weight     uint64
}

// policy is the memory tier's eviction state. Every structure is indexes and counters, never
// pointers (the collector has nothing to mark), and every operation is O(1) (s3fifo's eviction
// amortised: an entry is moved at most three times per hit it received).
type policy struct {
	kind      string
	cap       uint64
	q         [4]queue
	ghost     map[uint64]uint64 // s3fifo: key hash -> its sequence in ghostQ
	ghostQ    []ghostKey
	ghostSeq  uint64
	windowCap uint64 // tinylfu: the window's share (1% at first, then climbed)
	protCap   uint64 // tinylfu: the protected segment's share of the main space (80%)
	sketch    sketch
	climb     climber
}

// climber adapts tinylfu's window size by hill climbing on the hit rate, as Caffeine and otter
// do: after each sample of lookups it moves the window by a step in the direction that raised
// the hit rate last time (reversing when it fell), the step decaying as it settles and reset
// when the hit rate jumps (a new workload). A sample is as many lookups as entries resident
// (at least 512), so a small cache adapts within a few thousand requests.
type climber struct {
	hits, misses uint64
	prevRate     float64
	step         float64 // signed: positive grows the window
}

type ghostKey struct{ hash, seq uint64 }

func newPolicy(kind string, capacity uint64, objects bool) policy {
	if kind == "" {
		kind = EvictTinyLFU
	}
	p := policy{kind: kind, cap: capacity, ghost: map[uint64]uint64{}}
	for i := range p.q {
		p.q[i] = queue{head: -1, tail: -1}
	}
	p.windowCap = capacity / 100
	if objects {
		p.windowCap = max(p.windowCap, 1)
	}
	p.protCap = (capacity - p.windowCap) * 8 / 10
	p.sketch.init(1024)
	p.climb.step = float64(capacity) / 16
	return p
}

// lookup records a tinylfu lookup's outcome and, at the end of a sample, climbs.
func (p *policy) lookup(t *memTier, hit bool) {
	if p.kind != EvictTinyLFU {
		return
	}
	c := &p.climb
	if hit {
		c.hits++
	} else {
		c.misses++
	}
	if c.hits+c.misses < uint64(max(t.n, 512)) {
		return
	}
	rate := float64(c.hits) / float64(c.hits+c.misses)
	c.hits, c.misses = 0, 0
	delta := rate - c.prevRate
	if delta < 0 {
		c.step = -c.step
	}
	switch {
	case delta > 0.05 || delta < -0.05:
		c.step = float64(p.cap) / 16 * sign(c.step) // a new workload: big steps again
	default:
		c.step *= 0.98
	}
	c.prevRate = rate
	w := float64(p.windowCap) + c.step
	w = min(max(w, float64(p.cap)/100), float64(p.cap)*8/10)
	p.windowCap = uint64(w)
	if p.windowCap == 0 && t.objects {
		p.windowCap = 1
	}
	p.protCap = (p.cap - p.windowCap) * 8 / 10
}

// rebalanceStep bounds the entries one operation moves between tinylfu's segments, so a climb
// of the window (a sixteenth of the capacity at first) is spread over the following operations
// instead of stalling one lookup: every operation stays O(1).
const rebalanceStep = 8

// demote moves the protected segment's overflow (a few entries at most) back to probation.
func (p *policy) demote(t *memTier) {
	for n := 0; n < rebalanceStep && p.q[qC].weight > p.protCap && p.q[qC].tail >= 0; n++ {
		p.move(t, p.q[qC].tail, qB)
	}
}

func sign(x float64) float64 {
	if x < 0 {
		return -1
	}
	return 1
}

func (p *policy) push(t *memTier, q uint8, i int32) {
	sl := &t.slots[i]
	qu := &p.q[q]
	sl.queue, sl.prev, sl.next = q, -1, qu.head
	if qu.head >= 0 {
		t.slots[qu.head].prev = i
	}
	qu.head = i
	if qu.tail < 0 {
		qu.tail = i
	}
	qu.weight += uint64(sl.weight)
}

func (p *policy) unlink(t *memTier, i int32) {
	sl := &t.slots[i]
	qu := &p.q[sl.queue]
	if sl.prev >= 0 {
		t.slots[sl.prev].next = sl.next
	} else {
		qu.head = sl.next
	}
	if sl.next >= 0 {
		t.slots[sl.next].prev = sl.prev
	} else {
		qu.tail = sl.prev
	}
	sl.prev, sl.next = -1, -1
	qu.weight -= uint64(sl.weight)
}

func (p *policy) move(t *memTier, i int32, q uint8) {
	p.unlink(t, i)
	p.push(t, q, i)
}

func (p *policy) total() uint64 { return p.q[qA].weight + p.q[qB].weight + p.q[qC].weight }

// insert links a new slot: lru and tinylfu at the head of the first queue, s3fifo in the small
// queue unless its key was dropped from there recently (the ghost queue): then in main.
func (p *policy) insert(t *memTier, i int32) {
	h := t.slots[i].hash
	switch p.kind {
	case EvictS3FIFO:
		if _, ghosted := p.ghost[h]; ghosted {
			delete(p.ghost, h)
			p.push(t, qB, i)
			return
		}
	case EvictTinyLFU:
		p.sketch.ensure(t.n)
		p.sketch.add(h)
	}
	p.push(t, qA, i)
}

// replaced relinks slot i, whose record was replaced, at the head of its queue with weight w.
func (p *policy) replaced(t *memTier, i int32, w uint32) {
	q := t.slots[i].queue
	p.unlink(t, i)
	t.slots[i].weight = w
	p.push(t, q, i)
}

// hit counts an access: lru moves to the front; s3fifo counts (up to 3); tinylfu counts in the
// sketch, moves within the window or protected segment, and promotes from probation.
func (p *policy) hit(t *memTier, i int32) {
	sl := &t.slots[i]
	switch p.kind {
	case EvictLRU:
		p.move(t, i, qA)
	case EvictS3FIFO:
		sl.freq = min(sl.freq+1, 3)
	default:
		p.sketch.add(sl.hash)
		switch sl.queue {
		case qA, qC:
			p.move(t, i, sl.queue)
		case qB:
			p.move(t, i, qC)
			p.demote(t)
		}
	}
}

// evict drops entries until the weight fits the capacity.
func (p *policy) evict(t *memTier) {
	switch p.kind {
	case EvictLRU:
		for p.total() > p.cap {
			t.remove(p.q[qA].tail, true)
		}
	case EvictS3FIFO:
		p.evictS3FIFO(t)
	default:
		p.evictTinyLFU(t)
	}
}

// evictS3FIFO drops from the small queue while it holds over a tenth of the capacity (moving
// entries hit since insertion to main), else from main (reinserting entries hit since their last
// pass, one hit spent per pass).
func (p *policy) evictS3FIFO(t *memTier) {
	small, main := &p.q[qA], &p.q[qB]
	for p.total() > p.cap {
		if main.tail < 0 || (small.tail >= 0 && small.weight > p.cap/10) {
			i := small.tail
			if sl := &t.slots[i]; sl.freq > 0 {
				sl.freq = 0
				p.move(t, i, qB)
				continue
			}
			p.addGhost(t, t.slots[i].hash)
			t.remove(i, true)
			continue
		}
		i := main.tail
		if sl := &t.slots[i]; sl.freq > 0 {
			sl.freq--
			p.move(t, i, qB)
			continue
		}
		t.remove(i, true)
	}
}

// addGhost remembers a key hash dropped from the small queue; the ghost queue holds at most as
// many keys as there are resident entries (at least 16), oldest forgotten first.
func (p *policy) addGhost(t *memTier, h uint64) {
	p.ghostSeq++
	p.ghost[h] = p.ghostSeq
	p.ghostQ = append(p.ghostQ, ghostKey{h, p.ghostSeq})
	for len(p.ghostQ) > max(t.n, 16) {
		g := p.ghostQ[0]
		p.ghostQ = p.ghostQ[1:]
		if p.ghost[g.hash] == g.seq {
			delete(p.ghost, g.hash)
		}
	}
}

// evictTinyLFU: the window's overflow (its tail) is the candidate for the main space, the
// probation tail the victim; the one the sketch has seen less often is dropped (the candidate on
// a tie). With the window within its share, the main space's tail goes.
func (p *policy) evictTinyLFU(t *memTier) {
	win, prob, prot := &p.q[qA], &p.q[qB], &p.q[qC]
	for p.total() > p.cap {
		if win.tail >= 0 && (win.weight > p.windowCap || prob.tail < 0 && prot.tail < 0) {
			cand, victim := win.tail, prob.tail
			if victim < 0 {
				victim = prot.tail
			}
			if victim < 0 {
				t.remove(cand, true)
				continue
			}
			if p.sketch.freq(t.slots[cand].hash) > p.sketch.freq(t.slots[victim].hash) {
				t.remove(victim, true)
				p.move(t, cand, qB)
			} else {
				t.remove(cand, true)
			}
			continue
		}
		v := prob.tail
		if v < 0 {
			v = prot.tail
		}
		if v < 0 {
			v = win.tail
		}
		t.remove(v, true)
	}
	for n := 0; n < rebalanceStep && win.weight > p.windowCap && win.tail >= 0 && win.tail != win.head; n++ {
		p.move(t, win.tail, qB)
	}
	p.demote(t)
}

// sketch is a count-min sketch of 4 rows of saturating 8-bit counters (capped at 15), halved
// after 10 samples per counter so old popularity fades (TinyLFU's reset).
type sketch struct {
	rows  []uint8 // 4 rows of width counters
	width uint64
	adds  uint64
}

var sketchSeeds = [4]uint64{0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9, 0x94d049bb133111eb, 0xd6e8feb86659fd93}

func (k *sketch) init(width uint64) {
	k.width, k.adds = width, 0
	k.rows = make([]uint8, 4*width)
}

// ensure widens the sketch to at least n counters per row (a power of two), starting afresh.
func (k *sketch) ensure(n int) {
	if uint64(n) <= k.width {
		return
	}
	w := k.width
	for w < uint64(n) {
		w *= 2
	}
	k.init(w)
}

func (k *sketch) at(h uint64, r int) *uint8 {
	x := (h ^ h>>31) * sketchSeeds[r]
	return &k.rows[uint64(r)*k.width+(x>>32)&(k.width-1)]
}

func (k *sketch) add(h uint64) {
	for r := range 4 {
		if c := k.at(h, r); *c < 15 {
			*c++
		}
	}
	if k.adds++; k.adds >= 10*k.width {
		k.adds = 0
		for i := range k.rows {
			k.rows[i] /= 2
		}
	}
}

func (k *sketch) freq(h uint64) uint8 {
	f := uint8(15)
	for r := range 4 {
		f = min(f, *k.at(h, r))
	}
	return f
}
