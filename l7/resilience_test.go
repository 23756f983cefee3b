package l7

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// closedAddr returns a loopback address nothing listens on, for connect errors.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := ln.Addr().String()
	ln.Close()
	return a
}

func TestRetriesGoToAnotherBackend(t *testing.T) { onEveryEngine(t, testRetriesGoToAnotherBackend) }

func testRetriesGoToAnotherBackend(t *testing.T) {
	bad := startBackend(t, "bad", nil)
	bad.code.Store(503)
	good := startBackend(t, "good", nil)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes:
  - {name: w, match: {path: {prefix: /buffered}}, pool: p, retry: {attempts: 1, on_status: [503], non_idempotent: true, buffer_body: 1024}}
  - {name: r, pool: p, retry: {attempts: 1, on_status: [503]}}
pools: [{name: p, backends: [{address: %q}, {address: %q}], retry_budget: {percent: 100, min_per_second: 100}}]
`, bad.addr, good.addr))
	c := newTestClient()
	for i := 0; i < 4; i++ {
		resp, body := get(t, c, "GET", base+"/x", nil)
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "good") {
			t.Fatalf("GET try %d = %d %q, want the retry to land on good", i, resp.StatusCode, body)
		}
	}
	if bad.hits.Load() != 2 || good.hits.Load() != 4 {
		t.Errorf("hits bad=%d good=%d, want 2 and 4 (each bad first try retried once on the other)", bad.hits.Load(), good.hits.Load())
	}
	// POST is not idempotent: without opt-in it is never retried.
	statuses := map[int]int{}
	for i := 0; i < 4; i++ {
		resp, _ := get(t, c, "POST", base+"/x", strings.NewReader("data"))
		statuses[resp.StatusCode]++
	}
	if statuses[503] != 2 || statuses[200] != 2 {
		t.Errorf("POST statuses = %v, want 2x503 (not retried) and 2x200", statuses)
	}
	// An opted-in route with a buffered body replays the body on the retry.
	for i := 0; i < 2; i++ {
		resp, body := get(t, c, "POST", base+"/buffered", strings.NewReader("payload"))
		if resp.StatusCode != 200 || body != "good POST /buffered body=7" {
			t.Errorf("buffered POST = %d %q, want the replayed 7-byte body on good", resp.StatusCode, body)
		}
	}
}

func TestRetryOnConnectErrorAndBudget(t *testing.T) {
	onEveryEngine(t, testRetryOnConnectErrorAndBudget)
}

func testRetryOnConnectErrorAndBudget(t *testing.T) {
	good := startBackend(t, "good", nil)
	dead := closedAddr(t)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, retry: {attempts: 2}}]
pools: [{name: p, backends: [{address: %q}, {address: %q}], retry_budget: {percent: 0, min_per_second: 3}}]
`, dead, good.addr))
	c := newTestClient()
	ok, failed := 0, 0
	for i := 0; i < 20; i++ {
		resp, _ := get(t, c, "GET", base+"/x", nil)
		if resp.StatusCode == 200 {
			ok++
		} else {
			failed++
		}
	}
	// Half the first tries hit the dead backend; the budget allows 3 retries in its 2 s window,
	// the rest fail with 502 instead of multiplying load.
	if ok < 10+3 || ok > 10+3+3 || failed == 0 {
		t.Errorf("ok=%d failed=%d, want 13-16 ok (10 first tries + budgeted retries) and the rest 502", ok, failed)
	}
}

func TestLoadSheddingAndRateLimit(t *testing.T) { onEveryEngine(t, testLoadSheddingAndRateLimit) }

func testLoadSheddingAndRateLimit(t *testing.T) {
	slow := startBackend(t, "slow", nil)
	slow.delay.Store(int64(300 * time.Millisecond))
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes:
  - {name: limited, match: {path: {prefix: /limited}}, pool: fast, rate_limit: {key: "header:X-Client", rate: 1, burst: 2}}
  - {name: r, pool: p}
pools:
  - {name: p, max_in_flight: 2, backends: [{address: %q}]}
  - {name: fast, backends: [{address: %q}]}
`, slow.addr, startBackend(t, "fast", nil).addr))
	var wg sync.WaitGroup
	codes := make(chan *http.Response, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := testClient.Get(base + "/x")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			codes <- resp
		}()
	}
	wg.Wait()
	close(codes)
	shed := 0
	for resp := range codes {
		if resp.StatusCode == 503 {
			shed++
			if resp.Header.Get("X-Load-Shed") != "1" || resp.Header.Get("Retry-After") == "" {
				t.Errorf("shed response lacks X-Load-Shed/Retry-After: %v", resp.Header)
			}
		}
	}
	if shed != 4 {
		t.Errorf("shed %d of 6 concurrent requests, want 4 (pool limit 2)", shed)
	}
	c := newTestClient()
	got := []int{}
	for i := 0; i < 4; i++ {
		resp, _ := get(t, c, "GET", base+"/limited", nil, "X-Client", "alice")
		got = append(got, resp.StatusCode)
	}
	if fmt.Sprint(got) != "[200 200 429 429]" {
		t.Errorf("alice statuses = %v, want burst 2 then 429", got)
	}
	if resp, _ := get(t, c, "GET", base+"/limited", nil, "X-Client", "bob"); resp.StatusCode != 200 {
		t.Errorf("bob = %d, want 200 (separate bucket)", resp.StatusCode)
	}
}

func TestActiveHealthChecks(t *testing.T) {
	var mu sync.Mutex
	sick := false
	flaky := startBackend(t, "flaky", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := sick
		mu.Unlock()
		if r.URL.Path == "/health" && s {
			w.WriteHeader(500)
			return
		}
		w.Header().Set("X-Backend", "flaky")
	}))
	steady := startBackend(t, "steady", nil)
	s, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools:
  - name: p
    backends: [{address: %q}, {address: %q}]
    health: {path: /health, interval: 50ms, timeout: 40ms, rise: 2, fall: 2, expect_status: 200}
`, flaky.addr, steady.addr))
	mu.Lock()
	sick = true
	mu.Unlock()
	testutil.Eventually(t, 5*time.Second, func() bool { return !backendInfo(s, flaky.addr).Healthy }, "flaky was not marked down")
	for i := 0; i < 6; i++ {
		if resp, _ := get(t, http.DefaultClient, "GET", base+"/x", nil); resp.Header.Get("X-Backend") != "steady" {
			t.Fatalf("request went to %q while flaky is down", resp.Header.Get("X-Backend"))
		}
	}
	mu.Lock()
	sick = false
	mu.Unlock()
	testutil.Eventually(t, 5*time.Second, func() bool { return backendInfo(s, flaky.addr).Healthy }, "flaky did not come back up")
}

func TestOutlierEjectionWithCap(t *testing.T) { onEveryEngine(t, testOutlierEjectionWithCap) }

func testOutlierEjectionWithCap(t *testing.T) {
	a := startBackend(t, "a", nil)
	b := startBackend(t, "b", nil)
	c3 := startBackend(t, "c", nil)
	a.code.Store(500)
	b.code.Store(500)
	s, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools:
  - name: p
    backends: [{address: %q}, {address: %q}, {address: %q}]
    outlier: {consecutive_errors: 3, ejection_time: 1m, max_ejected_percent: 34}
`, a.addr, b.addr, c3.addr))
	for i := 0; i < 30; i++ {
		get(t, testClient, "GET", base+"/x", nil)
	}
	ea, eb := backendInfo(s, a.addr).Ejected, backendInfo(s, b.addr).Ejected
	if ea == eb {
		t.Errorf("ejected a=%v b=%v; want exactly one: the 34%% cap allows one of three", ea, eb)
	}
	if backendInfo(s, c3.addr).Ejected {
		t.Errorf("healthy backend c was ejected")
	}
}

func TestDrainLetsInFlightFinish(t *testing.T) {
	a := startBackend(t, "a", nil)
	b := startBackend(t, "b", nil)
	a.delay.Store(int64(400 * time.Millisecond))
	s, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}, {address: %q}]}]
`, a.addr, b.addr))
	done := make(chan string)
	go func() {
		resp, err := http.Get(base + "/slow")
		if err != nil {
			done <- err.Error()
			return
		}
		resp.Body.Close()
		done <- fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("X-Backend"))
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return backendInfo(s, a.addr).InFlight == 1 }, "the request never reached a")
	if err := s.Drain("p", a.addr, true); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if resp, _ := get(t, http.DefaultClient, "GET", base+"/x", nil); resp.Header.Get("X-Backend") != "b" {
			t.Fatalf("new request went to %q after drain", resp.Header.Get("X-Backend"))
		}
	}
	if got := <-done; got != "200 a" {
		t.Errorf("in-flight request on drained backend = %q, want 200 a", got)
	}
	if err := s.Drain("p", "127.0.0.1:1", true); err == nil {
		t.Error("drain of an unknown backend succeeded")
	}
}

func backendInfo(s *Server, addr string) BackendInfo {
	addr = curEngine.backend(addr) // as the configuration names it
	for _, b := range s.Backends() {
		if b.Address == addr {
			return b
		}
	}
	return BackendInfo{}
}

// A backend that cuts its response body short is blamed for it by passive health on every
// engine and on net/http's path (tries.relayed, the one classification): three such answers
// eject it with consecutive_errors: 3. (The goroutine engine and net/http once counted the 200
// head as a success.)
func TestTruncatedBodyCountsAgainstBackend(t *testing.T) {
	forEachEngineAndH2(t, func(t *testing.T, e engine) { testTruncatedBody(t, e, "HTTP/1.1") })
	t.Run("nethttp", func(t *testing.T) { testTruncatedBody(t, engine{name: "loops"}, "HTTP/1.0") })
}

func testTruncatedBody(t *testing.T, e engine, proto string) {
	addr, _ := rawBackend(t, func(c net.Conn) {
		if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789")
		}
	})
	p := e.start(t, oneRoute(", outlier: {consecutive_errors: 3, ejection_time: 1m, max_ejected_percent: 100}", e.backend(addr)))
	ejected := func() bool {
		for _, b := range p.s.Backends() {
			if b.Address == e.backend(addr) {
				return b.Ejected
			}
		}
		t.Fatalf("backend %s not in the pool", addr)
		return false
	}
	for i := range 3 {
		if ejected() {
			t.Fatalf("ejected after %d truncated answers; want 3", i)
		}
		c, br := p.dial(t)
		fmt.Fprintf(c, "GET /t%d %s\r\nHost: a\r\n\r\n", i, proto)
		if resp, err := http.ReadResponse(br, nil); err == nil {
			if body, err := io.ReadAll(resp.Body); err == nil {
				t.Fatalf("request %d: a whole body %q from a backend that cut it short", i, body)
			}
		}
		c.Close()
	}
	testutil.Eventually(t, 5*time.Second, ejected, "three truncated bodies did not eject the backend")
}
