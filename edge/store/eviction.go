package store

import (
	"fmt"
	"iter"
	"sync"

	"github.com/maypok86/otter/v2"
)

// Eviction policies of the memory tier (memory.eviction).
const (
	// EvictTinyLFU is W-TinyLFU (otter): scan-resistant admission by frequency. The default.
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

// memTier is what the store needs of its memory tier; *otter.Cache satisfies it, as does
// listCache for the lru and s3fifo policies.
type memTier interface {
	GetIfPresent(key string) (*Entry, bool)
	Peek(key string) (*Entry, bool)
	Set(key string, e *Entry) (*Entry, bool)
	Invalidate(key string) (*Entry, bool)
	All() iter.Seq2[string, *Entry]
	EstimatedSize() int
	IsWeighted() bool
	WeightedSize() uint64
}

// otterTier is the W-TinyLFU memory tier.
type otterTier struct{ *otter.Cache[string, *Entry] }

// Peek returns key's entry without counting an access.
func (t otterTier) Peek(key string) (*Entry, bool) {
	ent, ok := t.GetEntryQuietly(key)
	return ent.Value, ok
}

// node is one resident entry of a listCache, linked into its queue.
type node struct {
	key        string
	val        *Entry
	weight     uint64
	freq       uint8 // s3fifo: hits since insertion or the last reinsertion, capped at 3
	main       bool  // s3fifo: in the main queue rather than the small one
	prev, next *node
}

// queue is an intrusive doubly linked list: push at the head, take from the tail.
type queue struct {
	head, tail *node
	weight     uint64
}

func (q *queue) push(n *node) {
	n.prev, n.next = nil, q.head
	if q.head != nil {
		q.head.prev = n
	}
	q.head = n
	if q.tail == nil {
		q.tail = n
	}
	q.weight += n.weight
}

func (q *queue) remove(n *node) {
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		q.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		q.tail = n.prev
	}
	n.prev, n.next = nil, nil
	q.weight -= n.weight
}

// listCache is the memory tier for the lru and s3fifo policies: a map and linked queues behind
// one mutex, every operation O(1) (s3fifo's eviction amortised: each entry is moved at most
// three times per hit it received).
type listCache struct {
	mu       sync.Mutex
	s3fifo   bool
	capacity uint64
	weigher  func(*Entry) uint64 // nil: each entry weighs 1 (an object budget)
	onEvict  func(*Entry)        // called outside the lock for each entry evicted
	dropped  []*Entry            // evicted under the lock, for onEvict after it
	items    map[string]*node
	small    queue // lru: the only queue
	main     queue
	ghost    map[string]uint64 // s3fifo: key -> its sequence in ghostQ
	ghostQ   []ghostKey
	ghostSeq uint64
}

type ghostKey struct {
	key string
	seq uint64
}

// newListCache makes an lru or s3fifo memory tier of capacity (bytes with a weigher, else objects).
func newListCache(policy string, capacity uint64, weigher func(*Entry) uint64, onEvict func(*Entry)) *listCache {
	return &listCache{
		s3fifo: policy == EvictS3FIFO, capacity: capacity, weigher: weigher, onEvict: onEvict,
		items: map[string]*node{}, ghost: map[string]uint64{},
	}
}

func (c *listCache) weigh(e *Entry) uint64 {
	if c.weigher == nil {
		return 1
	}
	return c.weigher(e)
}

// GetIfPresent returns key's entry, counting the hit (lru: to the front; s3fifo: freq+1).
func (c *listCache) GetIfPresent(key string) (*Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.items[key]
	if !ok {
		return nil, false
	}
	if c.s3fifo {
		n.freq = min(n.freq+1, 3)
	} else {
		c.small.remove(n)
		c.small.push(n)
	}
	return n.val, true
}

// Peek returns key's entry without counting a hit.
func (c *listCache) Peek(key string) (*Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.items[key]; ok {
		return n.val, true
	}
	return nil, false
}

// Set stores e under key and evicts until the tier is within its capacity. An entry heavier
// than the whole capacity is not stored (as otter does). Evicted entries are reported to
// onEvict after the lock is released (the store's callback looks entries up again).
func (c *listCache) Set(key string, e *Entry) (*Entry, bool) {
	prev, ok := c.set(key, e)
	c.mu.Lock()
	dropped := c.dropped
	c.dropped = nil
	c.mu.Unlock()
	for _, d := range dropped {
		if c.onEvict != nil {
			c.onEvict(d)
		}
	}
	return prev, ok
}

func (c *listCache) set(key string, e *Entry) (*Entry, bool) {
	w := c.weigh(e)
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.items[key]; ok {
		prev := old.val
		c.unlink(old)
		delete(c.items, key)
		if w > c.capacity {
			return prev, true
		}
		n := &node{key: key, val: e, weight: w, freq: old.freq, main: old.main}
		c.link(n)
		c.evict()
		return prev, true
	}
	if w > c.capacity {
		return nil, false
	}
	n := &node{key: key, val: e, weight: w}
	if _, ghosted := c.ghost[key]; ghosted && c.s3fifo {
		delete(c.ghost, key) // seen recently and dropped from small: straight to main
		n.main = true
	}
	c.link(n)
	c.evict()
	return nil, false
}

func (c *listCache) link(n *node) {
	c.items[n.key] = n
	if n.main {
		c.main.push(n)
	} else {
		c.small.push(n)
	}
}

func (c *listCache) unlink(n *node) {
	if n.main {
		c.main.remove(n)
	} else {
		c.small.remove(n)
	}
}

// evict drops entries until the weight fits. lru drops the tail; s3fifo drops from the small
// queue while it holds over a tenth of the capacity (moving entries hit since insertion to main),
// else from main (reinserting entries hit since their last pass, one hit spent per pass).
func (c *listCache) evict() {
	for c.small.weight+c.main.weight > c.capacity {
		if !c.s3fifo {
			c.drop(c.small.tail)
			continue
		}
		if c.main.tail == nil || (c.small.tail != nil && c.small.weight > c.capacity/10) {
			t := c.small.tail
			if t.freq > 0 {
				c.small.remove(t)
				t.freq, t.main = 0, true
				c.main.push(t)
				continue
			}
			c.drop(t)
			c.addGhost(t.key)
			continue
		}
		t := c.main.tail
		if t.freq > 0 {
			t.freq--
			c.main.remove(t)
			c.main.push(t)
			continue
		}
		c.drop(t)
	}
}

func (c *listCache) drop(n *node) {
	c.unlink(n)
	delete(c.items, n.key)
	c.dropped = append(c.dropped, n.val)
}

// addGhost remembers a key dropped from the small queue; the ghost queue holds at most as many
// keys as there are resident entries (at least 16), oldest forgotten first.
func (c *listCache) addGhost(key string) {
	c.ghostSeq++
	c.ghost[key] = c.ghostSeq
	c.ghostQ = append(c.ghostQ, ghostKey{key, c.ghostSeq})
	for len(c.ghostQ) > max(len(c.items), 16) {
		g := c.ghostQ[0]
		c.ghostQ = c.ghostQ[1:]
		if c.ghost[g.key] == g.seq {
			delete(c.ghost, g.key)
		}
	}
}

// Invalidate removes key.
func (c *listCache) Invalidate(key string) (*Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.unlink(n)
	delete(c.items, key)
	return n.val, true
}

// All yields a snapshot of the resident entries.
func (c *listCache) All() iter.Seq2[string, *Entry] {
	c.mu.Lock()
	snap := make([]*node, 0, len(c.items))
	for _, n := range c.items {
		snap = append(snap, n)
	}
	c.mu.Unlock()
	return func(yield func(string, *Entry) bool) {
		for _, n := range snap {
			if !yield(n.key, n.val) {
				return
			}
		}
	}
}

// EstimatedSize returns the number of resident entries.
func (c *listCache) EstimatedSize() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// IsWeighted reports whether the capacity is in bytes.
func (c *listCache) IsWeighted() bool { return c.weigher != nil }

// WeightedSize returns the resident weight.
func (c *listCache) WeightedSize() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.small.weight + c.main.weight
}

// newListCacheFor builds the lru or s3fifo tier with the budget and weigher the otter options
// carry, so every policy counts an entry the same way.
func newListCacheFor(cfg Config, mo *otter.Options[string, *Entry]) *listCache {
	onEvict := func(e *Entry) {
		if mo.OnDeletion != nil {
			mo.OnDeletion(otter.DeletionEvent[string, *Entry]{Key: e.Meta.Key, Value: e, Cause: otter.CauseOverflow})
		}
	}
	if mo.Weigher == nil {
		return newListCache(cfg.Eviction, uint64(mo.MaximumSize), nil, onEvict)
	}
	return newListCache(cfg.Eviction, mo.MaximumWeight, func(e *Entry) uint64 { return uint64(mo.Weigher("", e)) }, onEvict)
}
