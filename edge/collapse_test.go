package edge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// TestCollapsing sends N concurrent misses for one key: the origin sees one request and every
// client gets the whole body, streamed while the origin is still sending it.
func TestCollapsing(t *testing.T) {
	t.Parallel()
	const n = 50
	body := strings.Repeat("x", 64<<10)
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Length", fmt.Sprint(2*len(body)))
		io.WriteString(w, body)
		w.(http.Flusher).Flush()
		<-release // the second half waits until every client has joined
		io.WriteString(w, body)
	})
	e := newEdge(t, o.URL, nil)
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := get(t, e.URL()+"/c")
			if r.status != 200 || len(r.body) != 2*len(body) || r.cache() != Miss {
				bad.Add(1)
			}
		}()
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return e.Stats().Collapsed.Load() >= n-1 },
		"%v of %d requests collapsed", e.Stats().Collapsed.Load, n-1)
	// One more waiter reads the first half while the origin still holds back the second: the
	// body is streamed to waiters, not handed over when complete.
	resp, err := http.Get(e.URL() + "/c")
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, len(body))
	readDone := make(chan error, 1)
	go func() { _, err := io.ReadFull(resp.Body, first); readDone <- err }()
	select {
	case err := <-readDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("waiter got no bytes before the origin finished: not streamed")
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(rest) != len(body) {
		t.Fatalf("streamed waiter got %d+%d bytes", len(first), len(rest))
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d clients got a wrong response", bad.Load())
	}
	if got := o.hits("/c"); got != 1 {
		t.Fatalf("origin saw %d requests for %d concurrent misses, want 1", got, n)
	}
	if got := e.Stats().Collapsed.Load(); got != n {
		t.Fatalf("collapsed = %d, want %d", got, n)
	}
	expect(t, get(t, e.URL()+"/c"), 200, Hit, "")
}

// TestCancelledLeaderDoesNotAbortFetch: the client that started the fetch goes away; the fetch
// completes and is stored.
func TestCancelledLeaderDoesNotAbortFetch(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "done")
	})
	e := newEdge(t, o.URL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.URL()+"/slow", nil)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("the first client should have timed out")
	}
	// The fetch finishes on its own: it leaves the fill map after its commit.
	settle(t, e)
	expect(t, get(t, e.URL()+"/slow"), 200, Hit, "done")
	if o.hits("/slow") != 1 {
		t.Fatalf("origin saw %d", o.hits("/slow"))
	}
}

// TestUncacheableIsRemembered: concurrent requests for an uncacheable URL each get the origin's
// own answer (it is never shared), and later ones go straight to the origin without queueing.
func TestUncacheableIsRemembered(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		v := n.Add(1)
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Cache-Control", "private")
		fmt.Fprintf(w, "user-%d", v)
	})
	e := newEdge(t, o.URL, nil)
	var wg sync.WaitGroup
	seen := sync.Map{}
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := get(t, e.URL()+"/me")
			if _, dup := seen.LoadOrStore(r.body, true); dup {
				t.Errorf("two clients got the same private response %q", r.body)
			}
		}()
	}
	wg.Wait()
	start := time.Now()
	var wg2 sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			if r := get(t, e.URL()+"/me"); r.cache() != Bypass {
				t.Errorf("X-Cache %s, want BYPASS", r.cache())
			}
		}()
	}
	wg2.Wait()
	// Not queued one behind another: five 300 ms fetches take about 300 ms in parallel, 1.5 s queued.
	if d := time.Since(start); d > time.Second {
		t.Fatalf("remembered-uncacheable requests took %v; they queued", d)
	}
}

// TestVaryWaiterGetsOwnVariant: a waiter whose request selects a different variant than the
// leader's does not get the leader's response.
func TestVaryWaiterGetsOwnVariant(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		fmt.Fprint(w, r.Header.Get("Accept-Language"))
	})
	e := newEdge(t, o.URL, nil)
	var wg sync.WaitGroup
	for _, lang := range []string{"en", "en", "de", "de", "fr"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := get(t, e.URL()+"/v", "Accept-Language", lang); r.body != lang {
				t.Errorf("asked for %s, got %q", lang, r.body)
			}
		}()
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
}

// TestLargeObjectSpillsToDisk: waiters on a fetch too large for memory read it from the disk
// tier's file instead of a memory buffer, and still get every byte, streamed.
func TestLargeObjectSpillsToDisk(t *testing.T) {
	t.Parallel()
	half := strings.Repeat("y", 64<<10)
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Length", fmt.Sprint(2*len(half)))
		io.WriteString(w, half)
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, half)
	})
	e := newEdge(t, o.URL, func(c *Config) { c.Disk.Dir = t.TempDir(); c.Memory.MaxObjectBytes = 1024 })
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := get(t, e.URL()+"/large", "Host", "h"); len(r.body) != 2*len(half) || r.body != half+half {
				t.Errorf("got %d bytes", len(r.body))
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	var f *fill
	for f == nil && time.Now().Before(deadline) {
		e.fillsMu.Lock()
		f = e.fills["h/large"]
		e.fillsMu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
	if f == nil {
		t.Fatal("no fill in flight")
	}
	for time.Now().Before(deadline) {
		f.mu.Lock()
		size, mem, spilled := f.size, len(f.body), f.spill != nil
		f.mu.Unlock()
		if size == int64(len(half)) {
			if !spilled || mem > 1024 {
				t.Errorf("in flight: %d bytes in memory, spilled %v; want at most 1024 and spilled", mem, spilled)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	wg.Wait()
	expect(t, get(t, e.URL()+"/large", "Host", "h"), 200, Hit, half+half)
	if o.hits("/large") != 1 {
		t.Fatalf("origin saw %d", o.hits("/large"))
	}
}

// TestPurgeWhileInFlight: a purge that arrives while the URL's response is still streaming in
// keeps that response from being stored after the purge (hard), or stores it stale (soft).
func TestPurgeWhileInFlight(t *testing.T) {
	t.Parallel()
	for _, soft := range []bool{false, true} {
		release := make(chan struct{})
		o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Surrogate-Key", "k")
			io.WriteString(w, "first half ")
			w.(http.Flusher).Flush()
			if r.Header.Get("X-Hold") != "" {
				<-release
			}
			io.WriteString(w, "second half")
		})
		e := newEdge(t, o.URL, nil)
		done := make(chan result)
		go func() { done <- get(t, e.URL()+"/f", "Host", "www.example.com", "X-Hold", "1") }()
		testutil.Eventually(t, 3*time.Second, func() bool { return e.Stats().OriginRequests.Load() > 0 }, "the fill never reached the origin")
		// Wait for the headers (and so the tags) of the fill in flight: a purge by tag before
		// them would not know the fill is tagged.
		testutil.Eventually(t, 5*time.Second, func() bool {
			e.fillsMu.Lock()
			defer e.fillsMu.Unlock()
			for _, f := range e.fills {
				f.mu.Lock()
				tagged := len(f.tags) > 0
				f.mu.Unlock()
				if tagged {
					return true
				}
			}
			return false
		}, "the fill in flight never had its tags")
		if _, err := e.Purge(PurgeRequest{Tags: []string{"k"}, Soft: soft}); err != nil {
			t.Fatal(err)
		}
		close(release)
		if r := <-done; r.body != "first half second half" {
			t.Fatalf("in-flight client got %q", r.body)
		}
		settle(t, e)
		r := get(t, e.URL()+"/f", "Host", "www.example.com")
		if r.cache() != Miss {
			t.Fatalf("soft=%v: after a purge during the fetch, X-Cache %s, want MISS (revalidated or refetched)", soft, r.cache())
		}
	}
}
