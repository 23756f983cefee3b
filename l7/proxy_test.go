package l7

import (
	"fmt"
	"strings"
	"testing"
)

// The lab's example: reads of /tracking to one pool, writes to /event to another, /asset to a
// static pool; a dot-dot path cannot reach a route it should not.
func TestRoutingSplitsReadsWritesAssets(t *testing.T) {
	onEveryEngine(t, testRoutingSplitsReadsWritesAssets)
}

func testRoutingSplitsReadsWritesAssets(t *testing.T) {
	r1 := startBackend(t, "read1", nil)
	r2 := startBackend(t, "read2", nil)
	w1 := startBackend(t, "write1", nil)
	a1 := startBackend(t, "asset1", nil)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes:
  - {name: tracking, match: {path: {prefix: /tracking}, methods: [GET, HEAD]}, pool: reads}
  - {name: event, match: {path: {exact: /event}, methods: [POST]}, pool: writes}
  - {name: asset, match: {path: {prefix: /asset}}, pool: static}
pools:
  - {name: reads, backends: [{address: %q}, {address: %q}]}
  - {name: writes, backends: [{address: %q}]}
  - {name: static, backends: [{address: %q}]}
`, r1.addr, r2.addr, w1.addr, a1.addr))
	c := newTestClient()
	for i := 0; i < 10; i++ {
		resp, body := get(t, c, "GET", base+"/tracking?no=1", nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "read") {
			t.Fatalf("GET /tracking = %d %q, want a read backend", resp.StatusCode, body)
		}
	}
	if r1.hits.Load() != 5 || r2.hits.Load() != 5 {
		t.Errorf("round robin over reads = %d/%d, want 5/5", r1.hits.Load(), r2.hits.Load())
	}
	if resp, body := get(t, c, "POST", base+"/event", strings.NewReader("hello")); resp.StatusCode != 200 || body != "write1 POST /event body=5" {
		t.Errorf("POST /event = %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, c, "GET", base+"/event", nil); resp.StatusCode != 404 {
		t.Errorf("GET /event = %d, want 404 (only POST is routed)", resp.StatusCode)
	}
	if resp, body := get(t, c, "GET", base+"/asset/app.js", nil); resp.StatusCode != 200 || !strings.HasPrefix(body, "asset1") {
		t.Errorf("GET /asset/app.js = %d %q", resp.StatusCode, body)
	}
	if resp, _ := get(t, c, "GET", base+"/assets", nil); resp.StatusCode != 404 {
		t.Errorf("GET /assets = %d, want 404 (prefix matches whole segments)", resp.StatusCode)
	}
	before := r1.hits.Load() + r2.hits.Load()
	for _, p := range []string{"/tracking/../admin", "/tracking/%2e%2e/admin", "/tracking/..%2fadmin"} {
		resp, err := c.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 && resp.StatusCode != 400 {
			t.Errorf("GET %s = %d, want 404 or 400", p, resp.StatusCode)
		}
	}
	if r1.hits.Load()+r2.hits.Load() != before {
		t.Errorf("a dot-dot path reached the reads pool")
	}
	// A dot-dot that stays inside the route is forwarded normalised.
	if resp, _ := get(t, c, "GET", base+"/tracking/a/../b", nil); resp.Header.Get("X-Seen-Path") != "/tracking/b" {
		t.Errorf("backend saw %q, want /tracking/b", resp.Header.Get("X-Seen-Path"))
	}
}

func TestForwardingHeaders(t *testing.T) { onEveryEngine(t, testForwardingHeaders) }

func testForwardingHeaders(t *testing.T) {
	b := startBackend(t, "b", nil)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
	resp, _ := get(t, testClient, "GET", base+"/x", nil,
		"X-Forwarded-For", "203.0.113.7", "Connection", "X-Hop", "X-Hop", "secret", "Host", "app.example")
	h := resp.Header
	if got := h.Get("X-Seen-X-Forwarded-For"); got != "203.0.113.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client chain with the proxy's peer appended", got)
	}
	scheme := "http"
	if curEngine.tls {
		scheme = "https"
	}
	if got := h.Get("X-Seen-X-Forwarded-Proto"); got != scheme {
		t.Errorf("X-Forwarded-Proto = %q", got)
	}
	if got := h.Get("X-Seen-Forwarded"); got != `for=127.0.0.1;proto=`+scheme+`;host="app.example"` {
		t.Errorf("Forwarded = %q", got)
	}
	if got := h.Get("X-Seen-Via"); got != "1.1 switchyard" {
		t.Errorf("request Via = %q", got)
	}
	if got := h.Get("X-Seen-X-Hop"); got != "" {
		t.Errorf("hop-by-hop header named in Connection reached the backend: %q", got)
	}
	if !strings.Contains(h.Get("Via"), "switchyard") {
		t.Errorf("response Via = %q", h.Get("Via"))
	}
}
