package store

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// indexed returns how many keys the tag index holds under tag, without the lazy clean-up that
// Tagged does.
func (t *tagIndex) indexed(tag string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.hashes[tag])
}

func putTagged(t *testing.T, s *Store, key string, tags ...string) {
	t.Helper()
	w, err := s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("body"))
	m := &Meta{Key: key, Primary: key, Status: 200, Header: http.Header{}, Tags: tags, ResponseTime: time.Now(), Lifetime: time.Hour}
	if _, err := w.Commit(m); err != nil {
		t.Fatal(err)
	}
}

// TestTagIndexForgetsEvictedEntries: with every eviction policy, and with a disk tier, an entry
// evicted for room leaves the tag index, so a tag purge never walks entries long gone.
func TestTagIndexForgetsEvictedEntries(t *testing.T) {
	for _, policy := range []string{EvictTinyLFU, EvictLRU, EvictS3FIFO, "disk"} {
		t.Run(policy, func(t *testing.T) {
			cfg := Config{MemoryObjects: 50, Eviction: policy}
			if policy == "disk" {
				cfg = Config{MemoryObjects: 10, Dir: t.TempDir(), DiskBytes: 60 * 8192}
			}
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 500; i++ {
				putTagged(t, s, fmt.Sprintf("k%d", i), "churn")
			}
			// otter evicts in maintenance passes: poll until the index has followed.
			deadline := time.Now().Add(10 * time.Second)
			for s.tags.indexed("churn") > s.Len()+25 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := s.tags.indexed("churn"); got > s.Len()+25 || got == 0 {
				t.Fatalf("%d keys indexed with %d entries stored", got, s.Len())
			}
			// Tagged visits the stored entries only (with a disk tier, memory may briefly hold
			// a few the disk index has just evicted).
			visited := 0
			s.Tagged("churn", func(*Meta) bool { visited++; return true })
			if visited > s.Len()+25 || visited < s.Len() {
				t.Fatalf("Tagged visited %d, %d stored", visited, s.Len())
			}
		})
	}
}

// TestTagIndexFollowsUpdates: a refresh that changes the tags moves the key; a delete drops it.
func TestTagIndexFollowsUpdates(t *testing.T) {
	s, err := Open(Config{MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	putTagged(t, s, "a", "x", "y")
	m, _ := s.Peek("a")
	c := m.Clone()
	c.Tags = []string{"y", "z"}
	if err := s.Update(c); err != nil {
		t.Fatal(err)
	}
	if s.tags.indexed("x") != 0 || s.tags.indexed("y") != 1 || s.tags.indexed("z") != 1 {
		t.Fatalf("after update: x=%d y=%d z=%d", s.tags.indexed("x"), s.tags.indexed("y"), s.tags.indexed("z"))
	}
	s.Delete("a")
	if s.tags.indexed("y") != 0 || s.tags.indexed("z") != 0 {
		t.Fatal("a deleted entry is still indexed")
	}
}
