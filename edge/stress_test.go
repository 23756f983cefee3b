package edge

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMixedLoad runs hits, misses, revalidations, Vary variants, unsafe methods, purges and pushes
// together for a second against a disk-backed edge, checking every body and that nothing hangs
// (run it with -race to check the locking).
func TestMixedLoad(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h := w.Header()
		h.Set("Etag", `"`+r.URL.Path+`"`)
		if r.Header.Get("If-None-Match") == `"`+r.URL.Path+`"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		switch {
		case strings.HasPrefix(r.URL.Path, "/v"):
			h.Set("Vary", "Accept-Language")
			h.Set("Cache-Control", "max-age=1")
		case strings.HasPrefix(r.URL.Path, "/p"):
			h.Set("Cache-Control", "private")
		default:
			h.Set("Cache-Control", "max-age=1, stale-while-revalidate=1")
		}
		h.Set("Surrogate-Key", "all")
		fmt.Fprintf(w, "%s|%s|%s", r.URL.Path, r.Header.Get("Accept-Language"), strings.Repeat("x", rand.IntN(3000)))
	})
	e := newEdge(t, o.URL, func(c *Config) {
		c.Disk.Dir = t.TempDir()
		c.Memory.MaxBytes = 64 << 10
		c.Memory.MaxObjectBytes = 2048
	})
	client := &http.Client{Timeout: 10 * time.Second}
	var bad atomic.Int32
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				path := fmt.Sprintf("/%c%d", "avp"[rand.IntN(3)], rand.IntN(20))
				lang := []string{"en", "de", ""}[rand.IntN(3)]
				method := http.MethodGet
				if rand.IntN(50) == 0 {
					method = http.MethodPost
				}
				req, _ := http.NewRequest(method, e.URL()+path, nil)
				if lang != "" {
					req.Header.Set("Accept-Language", lang)
				}
				if rand.IntN(10) == 0 {
					req.Header.Set("Range", "bytes=0-3")
				}
				resp, err := client.Do(req)
				if err != nil {
					bad.Add(1)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				// Only /v varies on the language; elsewhere any request's copy is right.
				want := path + "|"
				if strings.HasPrefix(path, "/v") {
					want += lang + "|"
				}
				switch {
				case method != http.MethodGet:
				case resp.StatusCode == http.StatusPartialContent:
					if string(b) != want[:4] {
						t.Logf("range %s: %q", path, b)
						bad.Add(1)
					}
				case resp.StatusCode != 200 || !strings.HasPrefix(string(b), want):
					t.Logf("%s %s lang=%q: %d %s %.40q", method, path, lang, resp.StatusCode, resp.Header.Get("X-Cache"), b)
					bad.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(deadline) {
			e.Purge(PurgeRequest{Tags: []string{"all"}, Soft: rand.IntN(2) == 0})
			e.Push(PushRequest{URLs: []string{"http://" + e.Addr() + "/a1"}, Refresh: true})
			time.Sleep(50 * time.Millisecond)
		}
	}()
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d bad responses", bad.Load())
	}
}
