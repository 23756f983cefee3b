package store

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

func put(t *testing.T, s *Store, key, body string, at time.Time) *Meta {
	t.Helper()
	w, err := s.NewWriter()
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte(body))
	m := &Meta{Key: key, Primary: key, Status: 200, Header: http.Header{}, ResponseTime: at, Lifetime: time.Hour}
	if _, err := w.Commit(m); err != nil {
		t.Fatal(err)
	}
	return m
}

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Config{MemoryBytes: 1 << 20, MaxObjectBytes: 16, Dir: dir, DiskBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRebuildKeepsCompleteNewestVersions: after a restart only complete, newest entries come
// back; temporaries, orphans, truncated bodies and superseded versions are removed.
func TestRebuildKeepsCompleteNewestVersions(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	put(t, s, "a", "small", time.Now())
	big := strings.Repeat("x", 100)
	put(t, s, "big", big, time.Now())
	old := put(t, s, "v", "old", time.Now().Add(-time.Minute))
	cur := put(t, s, "v", "new", time.Now())
	trunc := put(t, s, "t", "truncated body", time.Now())
	// Simulate a crash: the superseded version's files stay (its deletion never ran), a
	// temporary file is left, an orphan body has no meta, and one body lost its tail.
	s.writeMeta(old)
	os.WriteFile(s.path(old.File, ".body"), []byte("old"), 0o644)
	os.WriteFile(filepath.Join(dir, "tmp", "body-123"), []byte("partial"), 0o644)
	orphan := filepath.Join(dir, "ab", "ab"+strings.Repeat("0", 30)+"-1.body")
	os.MkdirAll(filepath.Dir(orphan), 0o755)
	os.WriteFile(orphan, []byte("orphan"), 0o644)
	os.WriteFile(s.path(trunc.File, ".body"), []byte("trunc"), 0o644)

	s2 := open(t, dir)
	if e, ok, _ := s2.Get("a"); !ok || string(e.Body) != "small" {
		t.Fatalf("a: %v %v", e, ok)
	}
	if e, ok, _ := s2.Get("v"); !ok || string(e.Body) != "new" || e.Meta.File != cur.File {
		t.Fatalf("v: newest version not kept: %+v", e)
	}
	e, ok, _ := s2.Get("big")
	if !ok || e.Body != nil {
		t.Fatalf("big: a body over MaxObjectBytes should stay on disk: %v", ok)
	}
	rs, done, err := s2.Reader(e)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 200)
	n, _ := rs.Read(b)
	done()
	if string(b[:n]) != big {
		t.Fatal("big body differs")
	}
	if _, ok, _ := s2.Get("t"); ok {
		t.Fatal("a truncated body came back as an entry")
	}
	for _, p := range []string{orphan, filepath.Join(dir, "tmp", "body-123"), s.path(old.File, ".body"), s.path(old.File, ".meta")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s survived the rebuild", p)
		}
	}
}

func TestFileNameIsHex(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{32}-[0-9a-z]+$`)
	for _, k := range []string{"../../etc/passwd", "/", "host/\x00/..", strings.Repeat("/..", 1000)} {
		if n := FileName(k, 42); !re.MatchString(n) {
			t.Fatalf("FileName(%q) = %q", k, n)
		}
	}
}

func TestDiskEvictionRemovesFiles(t *testing.T) {
	dir := t.TempDir()
	var evicted atomic.Int32 // counted on otter's executor goroutine
	s, err := Open(Config{MemoryBytes: 1 << 20, MaxObjectBytes: 1 << 20, Dir: dir, DiskBytes: 8 << 10,
		OnEvict: func(tier string) {
			if tier == "disk" {
				evicted.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		put(t, s, strings.Repeat("k", i+1), strings.Repeat("b", 1024), time.Now())
	}
	s.disk.CleanUp()
	bodies := func() int {
		files := 0
		filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() && strings.HasSuffix(p, ".body") {
				files++
			}
			return nil
		})
		return files
	}
	// Evictions run on otter's executor goroutine: wait for them, then check the bounds.
	testutil.Eventually(t, 5*time.Second, func() bool {
		_, d := s.Bytes()
		return d <= 8<<10 && bodies() <= 8 && evicted.Load() > 0
	}, "disk tier not back under its budget")
	files := bodies()
	if _, d := s.Bytes(); d > 8<<10 {
		t.Fatalf("disk tier holds %d bytes over an 8 KiB budget", d)
	}
	if files > 8 || evicted.Load() == 0 {
		t.Fatalf("%d body files remain, %d evictions", files, evicted.Load())
	}
}
