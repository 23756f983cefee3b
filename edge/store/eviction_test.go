package store

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

func ent(n int) *Entry { return &Entry{Meta: &Meta{}, Body: make([]byte, n)} }

func resident(c memTier, keys ...string) (in []string) {
	for _, k := range keys {
		if _, ok := c.(*listCache).items[k]; ok {
			in = append(in, k)
		}
	}
	return in
}

func TestLRUEvictsStrictlyByRecency(t *testing.T) {
	evicted := 0
	c := newListCache(EvictLRU, 3, nil, func(*Entry) { evicted++ })
	for _, k := range []string{"a", "b", "c"} {
		c.Set(k, ent(1))
	}
	c.GetIfPresent("a") // a is now the most recent: b is the least
	c.Set("d", ent(1))
	if got := resident(c, "a", "b", "c", "d"); strings.Join(got, ",") != "a,c,d" {
		t.Fatalf("after touching a and adding d: resident %v, want a,c,d", got)
	}
	c.Set("e", ent(1)) // c is the least recent now
	c.Set("f", ent(1)) // then a
	if got := resident(c, "a", "c", "d", "e", "f"); strings.Join(got, ",") != "d,e,f" {
		t.Fatalf("resident %v, want d,e,f", got)
	}
	if evicted != 3 || c.EstimatedSize() != 3 {
		t.Fatalf("evicted %d, size %d", evicted, c.EstimatedSize())
	}
}

func TestS3FIFODropsOneHitWondersFromSmallQueue(t *testing.T) {
	c := newListCache(EvictS3FIFO, 100, nil, nil)
	// 50 hot keys, each hit once after insertion: they move to the main queue when the small
	// queue overflows.
	for i := 0; i < 50; i++ {
		k := "hot" + strconv.Itoa(i)
		c.Set(k, ent(1))
		c.GetIfPresent(k)
	}
	// A scan of 10,000 keys seen once. LRU would have flushed every hot key.
	for i := 0; i < 10_000; i++ {
		c.Set("scan"+strconv.Itoa(i), ent(1))
	}
	hot := 0
	for i := 0; i < 50; i++ {
		if _, ok := c.items["hot"+strconv.Itoa(i)]; ok {
			hot++
			if !c.items["hot"+strconv.Itoa(i)].main {
				t.Fatalf("hot key %d still in the small queue", i)
			}
		}
	}
	if hot != 50 {
		t.Fatalf("%d of 50 hot keys survived a one-hit scan", hot)
	}
	if c.main.weight != 50 || c.EstimatedSize() != 100 {
		t.Fatalf("main queue weight %d, size %d", c.main.weight, c.EstimatedSize())
	}
	// The same scan through LRU loses them all.
	l := newListCache(EvictLRU, 100, nil, nil)
	for i := 0; i < 50; i++ {
		l.Set("hot"+strconv.Itoa(i), ent(1))
		l.GetIfPresent("hot" + strconv.Itoa(i))
	}
	for i := 0; i < 10_000; i++ {
		l.Set("scan"+strconv.Itoa(i), ent(1))
	}
	if len(resident(l, "hot0", "hot49")) != 0 {
		t.Fatal("lru kept hot keys through a scan")
	}
}

func TestS3FIFOGhostAdmitsToMain(t *testing.T) {
	c := newListCache(EvictS3FIFO, 20, nil, nil)
	c.Set("x", ent(1))
	for i := 0; i < 30; i++ { // x falls out of the small queue unhit, into the ghost queue
		c.Set("s"+strconv.Itoa(i), ent(1))
	}
	if _, ok := c.items["x"]; ok {
		t.Fatal("x still resident")
	}
	if _, ok := c.ghost["x"]; !ok {
		t.Fatal("x not in the ghost queue")
	}
	c.Set("x", ent(1))
	if n := c.items["x"]; n == nil || !n.main {
		t.Fatal("a ghosted key coming back must go straight to the main queue")
	}
	if len(c.ghostQ) > max(len(c.items), 16) {
		t.Fatalf("ghost queue %d entries", len(c.ghostQ))
	}
}

func TestEvictionPoliciesThroughStore(t *testing.T) {
	for _, pol := range []string{"", EvictTinyLFU, EvictLRU, EvictS3FIFO} {
		var evictions atomic.Int64                                                                  // otter calls OnEvict from its own goroutines
		one := uint64(entryWeight(&Entry{Meta: &Meta{Key: "k10"}, Body: make([]byte, 1000, 1024)})) // the writer's buffer: size class 1024
		s, err := Open(Config{MemoryBytes: int64(10 * one), Eviction: pol,
			OnEvict: func(string) { evictions.Add(1) }})
		if err != nil {
			t.Fatalf("%q: %v", pol, err)
		}
		for i := 0; i < 50; i++ {
			w, _ := s.NewWriter()
			w.Write(make([]byte, 1000))
			if _, err := w.Commit(&Meta{Key: "k" + strconv.Itoa(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if pol == EvictLRU || pol == EvictS3FIFO { // otter counts evictions asynchronously
			if m, _ := s.Bytes(); m > 10*one || evictions.Load() != 40 || s.Len() != 10 {
				t.Fatalf("%s: %d bytes, %d evictions, %d entries", pol, m, evictions.Load(), s.Len())
			}
			if _, ok, err := s.Get("k49"); !ok || err != nil {
				t.Fatalf("%s: newest entry missing", pol)
			}
		}
	}
	if _, err := Open(Config{MemoryBytes: 1 << 20, Eviction: "arc"}); err == nil || !strings.Contains(err.Error(), "tinylfu, lru or s3fifo") {
		t.Fatalf("unknown policy: %v", err)
	}
}
