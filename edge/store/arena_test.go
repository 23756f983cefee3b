package store

import (
	"bytes"
	"fmt"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// bodyOf is a body of n bytes that names its key, so a record read back under another key (or
// overwritten) shows.
func bodyOf(key string, n int) []byte {
	b := bytes.Repeat([]byte(key+"|"), n/(len(key)+1)+1)
	return b[:n]
}

var stamp = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func metaFor(key string) *Meta {
	return &Meta{Key: key, Primary: key, Status: 200, ResponseTime: stamp, Lifetime: time.Hour,
		Header: http.Header{"Content-Type": {"text/plain"}, "Etag": {`"` + key + `"`}}}
}

func commit(t testing.TB, s *Store, key string, body []byte) {
	t.Helper()
	w, err := s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	w.Write(body)
	if _, err := w.Commit(metaFor(key)); err != nil {
		t.Fatal(err)
	}
}

// bodyFor returns the body length that makes key's record exactly n bytes long.
func bodyFor(key string, n int) int {
	size := func(body int) int {
		m := metaFor(key)
		m.Size = int64(body)
		return recHeader + len(key) + len(appendMeta(nil, m)) + body
	}
	b := n - size(0)
	for size(b) > n {
		b--
	}
	if size(b) != n {
		panic(fmt.Sprintf("no body gives a record of %d bytes for %q", n, key))
	}
	return b
}

func checkEntry(t *testing.T, s *Store, key string, n int) {
	t.Helper()
	e, ok, err := s.Get(key)
	if !ok || err != nil {
		t.Fatalf("%s: not stored (%v)", key, err)
	}
	if !bytes.Equal(e.Body, bodyOf(key, n)) || e.Meta.Key != key || e.Meta.Header.Get("Etag") != `"`+key+`"` || e.Meta.Size != int64(n) {
		t.Fatalf("%s: read back %q (key %q, etag %q, size %d)", key, e.Body[:min(len(e.Body), 40)], e.Meta.Key, e.Meta.Header.Get("Etag"), e.Meta.Size)
	}
}

// TestArenaReusesSpaceAfterEviction: churning 30 times the budget through every policy keeps
// what the tier holds within the budget (dead records are compacted away, their chunks dropped),
// and the entries still stored read back whole.
func TestArenaReusesSpaceAfterEviction(t *testing.T) {
	for _, pol := range []string{EvictTinyLFU, EvictLRU, EvictS3FIFO} {
		t.Run(pol, func(t *testing.T) {
			const budget = 1 << 20
			s, err := Open(Config{MemoryBytes: budget, Eviction: pol})
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 30_000; i++ {
				k := "k" + strconv.Itoa(i)
				commit(t, s, k, bodyOf(k, 1000))
				if i%7 == 0 {
					s.Get("k" + strconv.Itoa(i/2)) // some hits, so the policies differ
				}
				if held, _ := s.Bytes(); held > budget {
					t.Fatalf("after %d objects the tier holds %d bytes of a %d budget", i+1, held, budget)
				}
			}
			a := &s.mem.a
			chunks := 0
			for _, c := range a.chunks {
				if c.buf != nil {
					chunks++
				}
			}
			if a.compacted == 0 || chunks > budget/a.chunkSize+1 || a.sealedDead() > s.mem.allowance {
				t.Fatalf("%d chunks of %d bytes held, %d dead, %d compactions", chunks, a.chunkSize, a.sealedDead(), a.compacted)
			}
			if s.Len() < 500 {
				t.Fatalf("only %d entries resident in a %d byte budget", s.Len(), budget)
			}
			n := 0
			for _, e := range s.mem.All() {
				checkEntry(t, s, e.Meta.Key, 1000)
				n++
			}
			if n != s.Len() {
				t.Fatalf("All yielded %d of %d", n, s.Len())
			}
		})
	}
}

// TestArenaNeverAliasesAFreedRecord: a reader that still holds an entry (a client being sent its
// body) keeps seeing its bytes after the entry is deleted and its chunk compacted and dropped,
// while new objects are written: the arena never hands out bytes that can still be read.
func TestArenaNeverAliasesAFreedRecord(t *testing.T) {
	const budget = 256 << 10
	s, err := Open(Config{MemoryBytes: budget, Eviction: EvictLRU})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, "old", bodyOf("old", 300))
	for i := 0; i < 5; i++ {
		commit(t, s, "n"+strconv.Itoa(i), bodyOf("n"+strconv.Itoa(i), 300)) // in old's chunk
	}
	held, ok, _ := s.Get("old")
	if !ok {
		t.Fatal("old not stored")
	}
	want := bodyOf("old", 300)
	s.mem.allowance = 0 // compact at the first dead byte, so old's chunk is moved, not only dropped
	s.Delete("old")
	for i := 0; i < 5000; i++ {
		k := "new" + strconv.Itoa(i)
		commit(t, s, k, bodyOf(k, 300))
		for j := 0; j < 5; j++ { // old's neighbours stay hot: their chunk must be compacted
			s.Get("n" + strconv.Itoa(j))
		}
	}
	// The record's chunk was compacted and dropped: no chunk of the arena holds its bytes.
	for _, c := range s.mem.a.chunks {
		p, lo := uintptr(unsafe.Pointer(&held.Body[0])), uintptr(unsafe.Pointer(unsafe.SliceData(c.buf)))
		if len(c.buf) > 0 && p >= lo && p < lo+uintptr(len(c.buf)) {
			t.Fatal("the deleted record's chunk is still in the arena: the test did not exercise reuse")
		}
	}
	if s.mem.a.compacted == 0 {
		t.Fatal("no chunk was compacted")
	}
	if !bytes.Equal(held.Body, want) || held.Meta.Key != "old" || held.Meta.Header.Get("Etag") != `"old"` {
		t.Fatalf("a freed record's bytes changed under its reader: %q, key %q", held.Body[:40], held.Meta.Key)
	}
	if _, ok, _ := s.Get("old"); ok {
		t.Fatal("a deleted entry came back")
	}
	for i := 4990; i < 5000; i++ {
		checkEntry(t, s, "new"+strconv.Itoa(i), 300)
	}
	for i := 0; i < 5; i++ {
		checkEntry(t, s, "n"+strconv.Itoa(i), 300) // moved by compaction, still whole
	}
}

// TestArenaSizesAtBoundaries: records that fill a chunk exactly, one byte over, the largest that
// shares a chunk and the smallest that gets its own, empty bodies, and a body several chunks
// long all read back whole; a dedicated chunk is released with its entry.
func TestArenaSizesAtBoundaries(t *testing.T) {
	const budget = 8 << 20
	s, err := Open(Config{MemoryBytes: budget})
	if err != nil {
		t.Fatal(err)
	}
	cs := s.mem.a.chunkSize
	sizes := map[string]int{}
	put := func(key string, n int) {
		commit(t, s, key, bodyOf(key, n))
		sizes[key] = n
	}
	put("empty", 0)
	// Fill the current chunk to exactly its end, then one record that must open the next.
	a := &s.mem.a
	for i := 0; len(a.chunks[a.cur].buf)-a.chunks[a.cur].used > cs/4; i++ {
		k := "fill" + strconv.Itoa(i)
		put(k, bodyFor(k, cs/8))
	}
	put("exact", bodyFor("exact", len(a.chunks[a.cur].buf)-a.chunks[a.cur].used))
	if c := a.chunks[a.cur]; c.used != len(c.buf) {
		t.Fatalf("chunk filled to %d of %d", c.used, len(c.buf))
	}
	cur := a.cur
	put("next", 10)
	if a.cur == cur {
		t.Fatal("a full chunk took another record")
	}
	put("shared", bodyFor("shared", cs/4)) // exactly a quarter of a chunk: still shared
	if s.mem.slots[s.mem.slotOf("shared")].chunk != a.cur {
		t.Fatal("a quarter-chunk record got a chunk of its own")
	}
	put("own", bodyFor("own", cs/4+1)) // one byte more: its own chunk
	own := s.mem.slots[s.mem.slotOf("own")].chunk
	if own == a.cur || len(a.chunks[own].buf) != cs/4+1 {
		t.Fatalf("a record one byte over a quarter chunk is in chunk %d (current %d)", own, a.cur)
	}
	put("huge", 3*cs+17) // bigger than a chunk
	for k, n := range sizes {
		checkEntry(t, s, k, n)
	}
	heldBefore := a.held
	hugeLen := len(a.chunks[s.mem.slots[s.mem.slotOf("huge")].chunk].buf)
	s.Delete("huge")
	if a.held != heldBefore-int64(hugeLen) {
		t.Fatalf("deleting a dedicated record released %d bytes, want %d", heldBefore-a.held, hugeLen)
	}
}

// TestMemoryTierHasFewHeapObjects counts the collector's work: the live heap objects per stored
// entry (runtime/metrics, after a full collection). Entries as Go objects (a header map, its
// value slices, a Meta, an Entry, the index node, the tag set's key string) were about a dozen
// each; in the arena an entry is a slot and bytes in a chunk, so 20,000 tagged entries add only
// the chunks, the slot array and the index buckets. (Lookups would add the tier's table of
// recently decoded views, bounded at 4,096; none are made here.)
func TestMemoryTierHasFewHeapObjects(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's instrumentation keeps objects of its own live")
	}
	const n = 20_000
	objects := func() uint64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/gc/heap/objects:objects"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	s, err := Open(Config{MemoryBytes: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	base := objects()
	body := make([]byte, 1024)
	for i := 0; i < n; i++ {
		w, _ := s.NewWriter()
		w.Write(body)
		k := fmt.Sprintf("http://scale.test/o/%d", i)
		m := &Meta{Key: k, Primary: k, Status: 200, Tags: []string{"t" + strconv.Itoa(i%100)}, ResponseTime: time.Now(),
			Header: http.Header{"Cache-Control": {"max-age=600"}, "Content-Type": {"application/octet-stream"},
				"Etag": {`"` + strconv.Itoa(i) + `"`}, "Last-Modified": {"Tue, 01 Dec 2026 10:00:00 GMT"}}}
		if _, err := w.Commit(m); err != nil {
			t.Fatal(err)
		}
	}
	per := float64(int64(objects())-int64(base)) / n
	runtime.KeepAlive(s)
	if s.Len() != n {
		t.Fatalf("%d of %d stored", s.Len(), n)
	}
	if per > 0.25 {
		t.Fatalf("%.2f live heap objects per stored entry; the memory tier should hold almost none", per)
	}
	t.Logf("%.3f heap objects per entry", per)
}

// TestHeadRecordFollowsItsEntry: a head set on an entry comes back with later views of it (the
// hot table forgotten), moves with it through compaction, weighs in the budget, and is gone
// once the entry is replaced.
func TestHeadRecordFollowsItsEntry(t *testing.T) {
	s, err := Open(Config{MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, "a", bodyOf("a", 100))
	e, _, _ := s.Get("a")
	if e.Head() != nil {
		t.Fatal("a new entry has a head")
	}
	before := s.mem.pol.total()
	e.SetHead([]byte("HTTP/1.1 200 OK\r\n"))
	if got := s.mem.pol.total(); got != before+recHeader+17 {
		t.Fatalf("the head is not counted: weight %d, was %d", got, before)
	}
	s.mem.mu.Lock()
	i := s.mem.find(s.hash("a"), "a")
	s.mem.forget(i)
	s.mem.allowance = 0
	s.mem.mu.Unlock()
	for j := 0; j < 3000; j++ { // churn and compaction (allowance 0) move both records
		k := "c" + strconv.Itoa(j)
		commit(t, s, k, bodyOf(k, 300))
		s.Get("a")
	}
	e, _, _ = s.Get("a")
	if string(e.Head()) != "HTTP/1.1 200 OK\r\n" || !bytes.Equal(e.Body, bodyOf("a", 100)) {
		t.Fatalf("after compaction: head %q, body %q", e.Head(), e.Body[:10])
	}
	if s.mem.a.compacted == 0 {
		t.Fatal("nothing was compacted")
	}
	commit(t, s, "a", bodyOf("a", 100)) // a new version: the old head does not describe it
	if e, _, _ := s.Get("a"); e.Head() != nil {
		t.Fatalf("a replaced entry kept the old head %q", e.Head())
	}
}

// TestIndexCollisionsAreToldApartByKey: two keys with the same 64-bit hash share an index bucket
// and are told apart by the key bytes in their records; removing one keeps the other.
func TestIndexCollisionsAreToldApartByKey(t *testing.T) {
	s, err := Open(Config{MemoryBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	mt := s.mem
	put := func(key string) {
		m := metaFor(key)
		m.Size = 50
		mt.mu.Lock()
		mt.set(42, key, appendMeta(nil, m), &Entry{Meta: m, Body: bodyOf(key, 50)})
		mt.mu.Unlock()
	}
	for _, k := range []string{"a", "b", "c"} {
		put(k)
	}
	get := func(key string) *Entry {
		mt.mu.Lock()
		defer mt.mu.Unlock()
		if i := mt.find(42, key); i >= 0 {
			return mt.entry(i)
		}
		return nil
	}
	for _, k := range []string{"a", "b", "c"} {
		if e := get(k); e == nil || e.Meta.Key != k || !bytes.Equal(e.Body, bodyOf(k, 50)) {
			t.Fatalf("%s: wrong or missing entry in a shared bucket", k)
		}
	}
	if get("d") != nil {
		t.Fatal("a key never stored was found in a shared bucket")
	}
	mt.mu.Lock()
	mt.remove(mt.find(42, "b"), false) // the middle of the chain
	mt.mu.Unlock()
	if get("b") != nil || get("a") == nil || get("c") == nil {
		t.Fatal("removing one key of a shared bucket lost another or kept it")
	}
	mt.mu.Lock()
	mt.remove(mt.find(42, "c"), false) // the head
	mt.mu.Unlock()
	if e := get("a"); e == nil || e.Meta.Key != "a" || len(mt.index) != 1 {
		t.Fatalf("after removing the head: a=%v, %d buckets", e != nil, len(mt.index))
	}
}
