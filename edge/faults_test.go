package edge

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// bodyFiles counts the committed body files of a disk tier.
func bodyFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".body") && !strings.HasPrefix(p, filepath.Join(dir, "tmp")) {
			n++
		}
		return nil
	})
	return n
}

// TestDiskReadAtDescriptorLimit runs the edge in a child process whose descriptor limit is
// exhausted, so disk reads fail with EMFILE for real: those disk hits must be 503s that keep
// their entries (files and index), not misses that delete them; once descriptors are free again
// every object is a hit and the origin was asked once per object.
func TestDiskReadAtDescriptorLimit(t *testing.T) {
	if os.Getenv("EDGE_EMFILE_CHILD") == "1" {
		emfileChild(t)
		return
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskReadAtDescriptorLimit$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "EDGE_EMFILE_CHILD=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || !strings.Contains(out.String(), "emfile child: ok") {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
}

func emfileChild(t *testing.T) {
	const objects = 20
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprint(w, strings.Repeat(r.URL.Path, 50))
	})
	dir := t.TempDir()
	// One object in memory: the others are read from disk on every hit.
	e := newEdge(t, o.URL, func(c *Config) { c.Disk.Dir = dir; c.Memory.MaxObjects = 1 })
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	fetch := func(i int) (int, string) {
		resp, err := client.Get(fmt.Sprintf("%s/o%d", e.URL(), i))
		if err != nil {
			t.Fatalf("object %d: %v", i, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for i := 0; i < objects; i++ {
		fetch(i)
		settle(t, e)
	}
	files := bodyFiles(t, dir)
	if files != objects {
		t.Fatalf("%d body files after the fill, want %d", files, objects)
	}

	// Exhaust the descriptors: a low soft limit, then open files until EMFILE.
	var rl syscall.Rlimit
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	low := rl
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatalf("lower RLIMIT_NOFILE: %v", err)
	}
	var hog []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errorsIsEMFILE(err) {
				t.Fatalf("open: %v", err)
			}
			break
		}
		hog = append(hog, f)
	}
	unavailable := 0
	for i := 0; i < objects; i++ {
		status, body := fetch(i) // on the open keep-alive connection: no descriptor needed
		switch {
		case status == http.StatusServiceUnavailable && strings.TrimSpace(body) == msgUnavailable:
			unavailable++
		case status == http.StatusOK:
		default:
			t.Errorf("object %d at the descriptor limit: %d %q", i, status, body)
		}
	}
	for _, f := range hog {
		f.Close()
	}
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	for i := 0; i < objects; i++ {
		if status, body := fetch(i); status != 200 || body != strings.Repeat(fmt.Sprintf("/o%d", i), 50) {
			t.Errorf("object %d after the limit: %d %q", i, status, body)
		}
	}
	if n := len(o.requests); n != objects {
		t.Errorf("origin asked %d times for %d objects", n, objects)
	}
	if got := bodyFiles(t, dir); got != objects {
		t.Errorf("%d body files after the limit, want %d (entries deleted)", got, objects)
	}
	if e.Stats().Unavailable.Load() != int64(unavailable) {
		t.Errorf("unavailable counter %d, want %d", e.Stats().Unavailable.Load(), unavailable)
	}
	if unavailable == 0 {
		t.Fatal("no disk hit was a 503 at the descriptor limit")
	}
	t.Logf("emfile child: %d of %d disk hits were 503 at the limit", unavailable, objects)
	fmt.Println("emfile child: ok")
}

func errorsIsEMFILE(err error) bool {
	var errno syscall.Errno
	for e := err; e != nil; {
		if pe, ok := e.(*fs.PathError); ok {
			e = pe.Err
			continue
		}
		errno, _ = e.(syscall.Errno)
		break
	}
	return errno == syscall.EMFILE || errno == syscall.ENFILE
}

// TestDiskCapCountsAllocatedBlocks: the disk budget counts the blocks the body and meta files
// take, so many small objects stay within the cap on disk.
func TestDiskCapCountsAllocatedBlocks(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprint(w, strings.Repeat("x", 100))
	})
	dir := t.TempDir()
	const capBytes = 256 << 10
	e := newEdge(t, o.URL, func(c *Config) { c.Disk.Dir = dir; c.Disk.MaxBytes = capBytes })
	for i := 0; i < 200; i++ {
		get(t, fmt.Sprintf("%s/s%d", e.URL(), i))
	}
	settle(t, e)
	used := func() int64 {
		var n int64
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasPrefix(p, filepath.Join(dir, "tmp")) {
				return nil
			}
			if st, err := os.Stat(p); err == nil {
				n += st.Sys().(*syscall.Stat_t).Blocks * 512
			}
			return nil
		})
		return n
	}
	// 200 entries take 200 x (4 KiB + 4 KiB) on a 4 KiB-block file system: over 6x the cap.
	testutil.Eventually(t, 5*time.Second, func() bool { return used() <= capBytes },
		"disk tier holds %v allocated bytes, over the %d cap", func() any { return used() }, capBytes)
	if _, disk := e.store.Bytes(); disk > capBytes || disk < capBytes/4 {
		t.Fatalf("disk weight %d, want near and under the cap %d", disk, capBytes)
	}
}
