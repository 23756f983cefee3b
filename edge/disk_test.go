package edge

import (
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func diskConfig(dir string) func(*Config) {
	return func(c *Config) { c.Disk.Dir = dir; c.Memory.MaxObjectBytes = 1024 }
}

// TestRestartRecovery stores responses on disk, stops the edge, starts a new one on the same
// directory, and serves them as hits without the origin, small (promoted to memory) and large
// (streamed from the file).
func TestRestartRecovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	big := strings.Repeat("B", 100<<10)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Vary", "Accept-Encoding")
		if r.URL.Path == "/big" {
			fmt.Fprint(w, big)
			return
		}
		fmt.Fprint(w, "small:"+r.Header.Get("Accept-Encoding"))
	})
	e1, err := New(Config{Listen: "127.0.0.1:0", Origin: o.URL, Disk: DiskConfig{Dir: dir}, Memory: MemoryConfig{MaxObjectBytes: 1024}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e1.Start(); err != nil {
		t.Fatal(err)
	}
	// The key holds the Host, so both edges are asked for the same site, as clients would.
	get(t, e1.URL()+"/small", "Accept-Encoding", "gzip", "Host", "www.example.com")
	get(t, e1.URL()+"/big", "Host", "www.example.com")
	e1.Close()

	e2 := newEdge(t, o.URL, diskConfig(dir))
	expect(t, get(t, e2.URL()+"/small", "Accept-Encoding", "gzip", "Host", "www.example.com"), 200, Hit, "small:gzip")
	expect(t, get(t, e2.URL()+"/big", "Host", "www.example.com"), 200, Hit, big)
	r := get(t, e2.URL()+"/big", "Range", "bytes=0-3", "Host", "www.example.com", "Accept-Encoding", "gzip")
	if r.status != 206 || r.body != "BBBB" {
		t.Fatalf("range from disk: %d %q", r.status, r.body)
	}
	if o.hits("/small")+o.hits("/big") != 2 {
		t.Fatalf("origin saw %d requests after restart", o.hits("/small")+o.hits("/big")-2)
	}
}

// TestPartialDownloadIsNotStored: the origin promises more bytes than it sends and closes the
// connection; the client sees a broken response and nothing is stored.
func TestPartialDownloadIsNotStored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			c.Read(buf)
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 1000\r\n\r\n"+strings.Repeat("p", 500))
			c.Close()
		}
	}()
	e := newEdge(t, "http://"+ln.Addr().String(), diskConfig(dir))
	resp, err := http.Get(e.URL() + "/p")
	if err == nil {
		b := make([]byte, 2000)
		n, rerr := resp.Body.Read(b)
		for rerr == nil {
			var k int
			k, rerr = resp.Body.Read(b[n:])
			n += k
		}
		resp.Body.Close()
		if n >= 1000 {
			t.Fatalf("client got a complete body from a broken origin")
		}
	}
	settle(t, e) // the fill has ended (and aborted its writer)
	if e.store.Len() != 0 {
		t.Fatalf("a partial download became an entry")
	}
	files := 0
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return nil
	})
	if files != 0 {
		t.Fatalf("%d files left in the cache directory after a failed download", files)
	}
}

// TestPathSafety requests keys full of path tricks; every file must stay inside the cache
// directory with a hashed name.
func TestPathSafety(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "x")
	})
	e := newEdge(t, o.URL, diskConfig(dir))
	for _, p := range []string{"/../../../../etc/passwd", "/%2e%2e/%2e%2e/x", "/a/../../b", "/" + strings.Repeat("a", 3000), "/x?../../y"} {
		req, _ := http.NewRequest(http.MethodGet, e.URL()+"/", nil)
		req.URL.Opaque = p // send the raw path, not a cleaned one
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, h := range []string{"../../evil", "a/b\\c"} {
		get(t, e.URL()+"/h", "Host", h)
	}
	name := regexp.MustCompile(`^[0-9a-f]{32}-[0-9a-z]+\.(meta|body)$`)
	temp := regexp.MustCompile(`^tmp/(meta|body)-[0-9]+$`) // a commit still being written
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if strings.HasPrefix(rel, "..") || !name.MatchString(d.Name()) && !temp.MatchString(rel) {
			t.Errorf("unexpected file %s", p)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("nothing was stored on disk")
	}
	if _, err := os.Stat("/etc/passwd.meta"); err == nil {
		t.Fatal("a file escaped the cache directory")
	}
}
