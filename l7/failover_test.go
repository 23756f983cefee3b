package l7

import (
	"fmt"
	"strings"
	"testing"
)

func TestFailoverHeader(t *testing.T) { onEveryEngine(t, testFailoverHeader) }

// testFailoverHeader: a GET retried on the other backend carries retry.failover_header, one
// answered by its first backend does not, and a POST (not retried) never does.
func testFailoverHeader(t *testing.T) {
	bad := startBackend(t, "bad", nil)
	bad.code.Store(503)
	good := startBackend(t, "good", nil)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, retry: {attempts: 1, on_status: [503], failover_header: X-Edge-Failover}}]
pools: [{name: p, backends: [{address: %q}, {address: %q}], retry_budget: {percent: 100, min_per_second: 100}}]
`, bad.addr, good.addr))
	c := newTestClient()
	marked, plain := 0, 0
	for i := 0; i < 6; i++ {
		resp, body := get(t, c, "GET", base+"/x", nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "good") {
			t.Fatalf("GET %d = %d %q", i, resp.StatusCode, body)
		}
		if resp.Header.Get("X-Edge-Failover") == "1" {
			marked++
		} else {
			plain++
		}
	}
	if marked != 3 || plain != 3 || bad.hits.Load() != 3 {
		t.Errorf("failover-marked %d, plain %d, bad hits %d; want 3, 3, 3 (round robin: every other first try is bad)", marked, plain, bad.hits.Load())
	}
	for i := 0; i < 2; i++ {
		resp, _ := get(t, c, "POST", base+"/x", strings.NewReader("d"))
		if resp.Header.Get("X-Edge-Failover") != "" {
			t.Errorf("POST %d (%d) carries X-Edge-Failover: POST is never retried", i, resp.StatusCode)
		}
	}
}

func TestFailoverHeaderConfig(t *testing.T) {
	_, err := ParseConfig([]byte("listeners: [{address: \"127.0.0.1:0\"}]\nroutes:\n  - {name: r, pool: p, retry: {attempts: 1, failover_header: \"X Bad\"}}\npools: [{name: p, backends: [{address: \"127.0.0.1:1\"}]}]\n"))
	if err == nil || !strings.Contains(err.Error(), "failover_header") || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("bad header name: %v", err)
	}
}
