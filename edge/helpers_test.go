package edge

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// testOrigin is a real HTTP origin on loopback that counts the requests it receives.
type testOrigin struct {
	*httptest.Server
	mu       sync.Mutex
	count    map[string]int
	requests []*http.Request
}

func newOrigin(t *testing.T, h http.HandlerFunc) *testOrigin {
	t.Helper()
	o := &testOrigin{count: map[string]int{}}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.count[r.URL.Path]++
		o.requests = append(o.requests, r.Clone(r.Context()))
		o.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *testOrigin) hits(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.count[path]
}

func (o *testOrigin) last() *http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[len(o.requests)-1]
}

func newEdge(t *testing.T, origin string, mutate func(*Config)) *Edge {
	t.Helper()
	// Tiers on loopback: the token may travel over plain HTTP (edge/origintls.go).
	cfg := Config{Listen: "127.0.0.1:0", Origin: origin, Tiers: TierConfig{Token: testTierToken, PlaintextToken: true}}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := New(cfg, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

type result struct {
	status int
	body   string
	h      http.Header
}

func (r result) cache() string { return r.h.Get("X-Cache") }

func do(t *testing.T, method, url string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, string(b), resp.Header}
}

func get(t *testing.T, url string, hdr ...string) result { return do(t, http.MethodGet, url, hdr...) }

func expect(t *testing.T, r result, status int, cache, body string) {
	t.Helper()
	if r.status != status || r.cache() != cache || (body != "" && r.body != body) {
		t.Fatalf("got %d %s %q, want %d %s %q", r.status, r.cache(), r.body, status, cache, body)
	}
	if r.h.Get("Age") == "" {
		t.Fatalf("response without Age header: %v", r.h)
	}
}

// settle waits until the edge has no fetch in flight (a HEAD client, for one, is answered before
// the body it made the edge fetch is stored).
func settle(t *testing.T, e *Edge) {
	t.Helper()
	testutil.Eventually(t, 3*time.Second, func() bool {
		e.fillsMu.Lock()
		defer e.fillsMu.Unlock()
		return len(e.fills) == 0
	}, "fetches still in flight")
}
