package store

import (
	"hash/maphash"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

func ent(n int) *Entry { return &Entry{Meta: &Meta{}, Body: make([]byte, n)} }

// objectTier is a memory tier of capacity objects under policy; onEvict may be nil.
func objectTier(policy string, capacity int, onEvict func(*Meta)) *memTier {
	return newMemTier(&Store{seed: maphash.MakeSeed()}, policy, capacity, 0, onEvict)
}

func (t *memTier) slotOf(key string) int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.find(t.s.hash(key), key)
}

func (t *memTier) set1(key string) { t.Set(key, &Entry{Meta: &Meta{Key: key}, Body: []byte("x")}) }

func resident(c *memTier, keys ...string) (in []string) {
	for _, k := range keys {
		if c.slotOf(k) >= 0 {
			in = append(in, k)
		}
	}
	return in
}

func TestLRUEvictsStrictlyByRecency(t *testing.T) {
	evicted := 0
	c := objectTier(EvictLRU, 3, func(*Meta) { evicted++ })
	for _, k := range []string{"a", "b", "c"} {
		c.set1(k)
	}
	c.GetIfPresent("a") // a is now the most recent: b is the least
	c.set1("d")
	if got := resident(c, "a", "b", "c", "d"); strings.Join(got, ",") != "a,c,d" {
		t.Fatalf("after touching a and adding d: resident %v, want a,c,d", got)
	}
	c.set1("e") // c is the least recent now
	c.set1("f") // then a
	if got := resident(c, "a", "c", "d", "e", "f"); strings.Join(got, ",") != "d,e,f" {
		t.Fatalf("resident %v, want d,e,f", got)
	}
	if evicted != 3 || c.EstimatedSize() != 3 {
		t.Fatalf("evicted %d, size %d", evicted, c.EstimatedSize())
	}
}

func TestS3FIFODropsOneHitWondersFromSmallQueue(t *testing.T) {
	c := objectTier(EvictS3FIFO, 100, nil)
	// 50 hot keys, each hit once after insertion: they move to the main queue when the small
	// queue overflows.
	for i := 0; i < 50; i++ {
		k := "hot" + strconv.Itoa(i)
		c.set1(k)
		c.GetIfPresent(k)
	}
	// A scan of 10,000 keys seen once. LRU would have flushed every hot key.
	for i := 0; i < 10_000; i++ {
		c.set1("scan" + strconv.Itoa(i))
	}
	hot := 0
	for i := 0; i < 50; i++ {
		if i := c.slotOf("hot" + strconv.Itoa(i)); i >= 0 {
			hot++
			if c.slots[i].queue != qB {
				t.Fatalf("hot key %d still in the small queue", i)
			}
		}
	}
	if hot != 50 {
		t.Fatalf("%d of 50 hot keys survived a one-hit scan", hot)
	}
	if c.pol.q[qB].weight != 50 || c.EstimatedSize() != 100 {
		t.Fatalf("main queue weight %d, size %d", c.pol.q[qB].weight, c.EstimatedSize())
	}
	// The same scan through LRU loses them all.
	l := objectTier(EvictLRU, 100, nil)
	for i := 0; i < 50; i++ {
		l.set1("hot" + strconv.Itoa(i))
		l.GetIfPresent("hot" + strconv.Itoa(i))
	}
	for i := 0; i < 10_000; i++ {
		l.set1("scan" + strconv.Itoa(i))
	}
	if len(resident(l, "hot0", "hot49")) != 0 {
		t.Fatal("lru kept hot keys through a scan")
	}
}

func TestS3FIFOGhostAdmitsToMain(t *testing.T) {
	c := objectTier(EvictS3FIFO, 20, nil)
	c.set1("x")
	for i := 0; i < 30; i++ { // x falls out of the small queue unhit, into the ghost queue
		c.set1("s" + strconv.Itoa(i))
	}
	if c.slotOf("x") >= 0 {
		t.Fatal("x still resident")
	}
	if _, ok := c.pol.ghost[c.s.hash("x")]; !ok {
		t.Fatal("x not in the ghost queue")
	}
	c.set1("x")
	if i := c.slotOf("x"); i < 0 || c.slots[i].queue != qB {
		t.Fatal("a ghosted key coming back must go straight to the main queue")
	}
	if len(c.pol.ghostQ) > max(c.n, 16) {
		t.Fatalf("ghost queue %d entries", len(c.pol.ghostQ))
	}
}

func TestEvictionPoliciesThroughStore(t *testing.T) {
	for _, pol := range []string{"", EvictTinyLFU, EvictLRU, EvictS3FIFO} {
		var evictions atomic.Int64
		budget := int64(64 << 10)
		s, err := Open(Config{MemoryBytes: budget, Eviction: pol, OnEvict: func(string) { evictions.Add(1) }})
		if err != nil {
			t.Fatalf("%q: %v", pol, err)
		}
		for i := 0; i < 500; i++ {
			w, _ := s.NewWriter()
			w.Write(make([]byte, 1000))
			if _, err := w.Commit(&Meta{Key: "k" + strconv.Itoa(i)}); err != nil {
				t.Fatal(err)
			}
		}
		m, _ := s.Bytes()
		if m > uint64(budget) || int(evictions.Load())+s.Len() != 500 || s.Len() < 40 {
			t.Fatalf("%q: %d bytes held of %d, %d evictions, %d entries", pol, m, budget, evictions.Load(), s.Len())
		}
		if pol == EvictLRU || pol == EvictS3FIFO { // tinylfu may turn a newcomer away
			if _, ok, err := s.Get("k499"); !ok || err != nil {
				t.Fatalf("%s: newest entry missing", pol)
			}
		}
	}
	if _, err := Open(Config{MemoryBytes: 1 << 20, Eviction: "arc"}); err == nil || !strings.Contains(err.Error(), "tinylfu, lru or s3fifo") {
		t.Fatalf("unknown policy: %v", err)
	}
}

// TestTinyLFUKeepsFrequentKeysThroughAScan: keys hit often survive a scan of keys seen once
// (the sketch turns the newcomers away), which plain LRU does not.
func TestTinyLFUKeepsFrequentKeysThroughAScan(t *testing.T) {
	c := objectTier(EvictTinyLFU, 100, nil)
	for i := 0; i < 50; i++ {
		c.set1("hot" + strconv.Itoa(i))
	}
	for r := 0; r < 5; r++ {
		for i := 0; i < 50; i++ {
			c.GetIfPresent("hot" + strconv.Itoa(i))
		}
	}
	for i := 0; i < 10_000; i++ {
		c.set1("scan" + strconv.Itoa(i))
	}
	hot := 0
	for i := 0; i < 50; i++ {
		if c.slotOf("hot"+strconv.Itoa(i)) >= 0 {
			hot++
		}
	}
	if hot < 48 || c.EstimatedSize() != 100 {
		t.Fatalf("%d of 50 hot keys survived a one-hit scan, %d resident", hot, c.EstimatedSize())
	}
}
