package l7

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"golang.org/x/net/http2"
)

// budgetLimit is the descriptor limit the tests' budget is cut from (withDescriptorLimit): a
// reserve of 64 and a room of 16 for client and upstream connections together.
const budgetLimit = 64 + 16

// budgetBackend answers /slow when release is closed, /health with a close (every probe needs a
// new socket, as in TestDescriptorExhaustionKeepsBackendsUp) and the rest at once.
type budgetBackend struct {
	*backend
	release chan struct{}
	once    sync.Once
	slow    atomic.Int64 // /slow requests waiting
	checks  atomic.Int64 // health probes seen
}

func startBudgetBackend(t *testing.T, name string) *budgetBackend {
	bb := &budgetBackend{release: make(chan struct{})}
	bb.backend = startBackend(t, name, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			bb.checks.Add(1)
			w.Header().Set("Connection", "close")
		case "/slow":
			bb.slow.Add(1)
			defer bb.slow.Add(-1)
			select {
			case <-bb.release:
			case <-r.Context().Done():
			}
		}
		fmt.Fprint(w, name+" ok")
	}))
	t.Cleanup(bb.finish) // before the backend stops: slow requests still waiting end
	return bb
}

// finish answers the slow requests waiting and those to come.
func (bb *budgetBackend) finish() { bb.once.Do(func() { close(bb.release) }) }

// TestUpstreamsShareTheDescriptorBudget is the fault "upstream descriptors are not
// bounded" on every engine: slow requests holding upstream connections fill a small budget. (a)
// requests past it are shed with 503 and Retry-After, never 502, by the core to HTTP/1.1 and h2c
// pools alike, and succeed as soon as the slow ones finish; (b) health checks keep probing on the
// reserve and the backend stays healthy; (c) the local refusals are not counted by outlier
// detection (consecutive_errors: 1 would eject at the first).
func TestUpstreamsShareTheDescriptorBudget(t *testing.T) {
	forEachEngineAndH2(t, testUpstreamBudget)
}

func testUpstreamBudget(t *testing.T, e engine) {
	slow := startBudgetBackend(t, "slow")
	grpcish := startBudgetBackend(t, "h2c")
	p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
limits: {max_connections: 12}
routes:
  - {name: q, pool: q, match: {path: {prefix: /q}}}
  - {name: r, pool: p}
pools:
  - name: p
    backends: [{address: %q}]
    health: {path: /health, interval: 100ms, timeout: 90ms, fall: 3, rise: 1}
    outlier: {consecutive_errors: 1, ejection_time: 1m, max_ejected_percent: 100}
  - name: q
    protocol: h2c
    backends: [{address: %q}]
    outlier: {consecutive_errors: 1, ejection_time: 1m, max_ejected_percent: 100}
`, e.backend(slow.addr), e.backend(grpcish.addr)), withDescriptorLimit(budgetLimit))
	ask := keepAlive(t, p, e)
	if r := ask("/ok"); r.StatusCode != 200 {
		t.Fatalf("before the slow requests: %d", r.StatusCode)
	}

	// Fill the budget: 12 clients and 4 upstream connections on HTTP/1.1 (one connection a slow
	// request), or 2 clients and up to 14 upstream connections for 20 streams of one HTTP/2
	// connection. Each request's status arrives on codes, the slow ones' when released.
	n := 11
	if e.h2 {
		n = 20
	}
	codes := make(chan *http.Response, n)
	slowRequests(t, p, e, n, codes)
	var shed []*http.Response
	testutil.Eventually(t, 5*time.Second, func() bool {
		for len(codes) > 0 {
			shed = append(shed, <-codes)
		}
		return int(slow.slow.Load())+len(shed) == n
	}, "not every slow request holds an upstream connection or was answered")
	if len(shed) == 0 {
		t.Fatalf("%d slow requests, each holding an upstream connection, fit in a room of 16 with %d clients: the upstream connections are not counted", n, p.s.conns.Clients())
	}
	t.Logf("%d of %d slow requests shed; %d clients, %d upstream connections", len(shed), n, p.s.conns.Clients(), p.s.conns.Upstreams())
	for _, r := range shed {
		if r.StatusCode != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
			t.Fatalf("a request past the budget: %d (Retry-After %q), want 503 with Retry-After", r.StatusCode, r.Header.Get("Retry-After"))
		}
	}

	// (a) The keep-alive client is served from an idle upstream connection or shed, never 502;
	// the h2c pool has no connection yet, so it is shed.
	if r := ask("/ok"); r.StatusCode != 200 && (r.StatusCode != 503 || r.Header.Get("Retry-After") == "") {
		t.Errorf("keep-alive client during the exhaustion: %d (Retry-After %q), want 200 or 503 with Retry-After", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if r := ask("/q"); r.StatusCode != 503 || r.Header.Get("Retry-After") == "" {
		t.Errorf("h2c pool during the exhaustion: %d (Retry-After %q), want 503 with Retry-After", r.StatusCode, r.Header.Get("Retry-After"))
	}
	// (b) Health checks need a new socket each and still get one, from the reserve.
	before := slow.checks.Load()
	testutil.Eventually(t, 5*time.Second, func() bool { return slow.checks.Load() >= before+3 }, "no health checks during the exhaustion")
	// (c) No refusal counted against a backend.
	st := p.s.state.Load()
	for _, name := range []string{"p", "q"} {
		if b := st.pools[name].backends[0]; !b.Healthy() || b.Ejected() {
			t.Errorf("pool %s: backend healthy %v, ejected %v after local refusals", name, b.Healthy(), b.Ejected())
		}
	}

	slow.finish()
	for range n - len(shed) {
		if r := <-codes; r.StatusCode != 200 {
			t.Errorf("a slow request that held an upstream connection: %d", r.StatusCode)
		}
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return ask("/ok").StatusCode == 200 }, "the keep-alive client was not served after the slow requests")
	if r := ask("/q"); r.StatusCode != 200 {
		t.Errorf("h2c pool after the slow requests: %d", r.StatusCode)
	}
}

// keepAlive returns a function that asks for a path on one keep-alive client connection
// (HTTP/1.1, or HTTP/2 on the h2 engines) and returns the response, its body read.
func keepAlive(t *testing.T, p *engineProxy, e engine) func(path string) *http.Response {
	if e.h2 {
		cc, scheme := dialH2Conn(t, p)
		return func(path string) *http.Response {
			t.Helper()
			req, _ := http.NewRequest("GET", scheme+"://a"+path, nil)
			resp, err := cc.RoundTrip(req)
			if err != nil {
				t.Fatalf("keep-alive client, %s: %v", path, err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp
		}
	}
	ka, kbr := p.dial(t)
	return func(path string) *http.Response {
		t.Helper()
		fmt.Fprintf(ka, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", path)
		resp := readAll(kbr)
		if resp.StatusCode == 0 {
			t.Fatalf("keep-alive client, %s: no response", path)
		}
		return resp
	}
}

// dialH2Conn opens an HTTP/2 connection to the proxy (h2c, or h2 over TLS) and returns it with
// the scheme of its requests.
func dialH2Conn(t *testing.T, p *engineProxy) (*http2.ClientConn, string) {
	t.Helper()
	var nc net.Conn
	var err error
	scheme := "http"
	if p.tls {
		scheme = "https"
		nc, err = tls.Dial("tcp", p.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // test certificate
	} else {
		nc, err = net.Dial("tcp", p.addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	cc, err := (&http2.Transport{}).NewClientConn(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc, scheme
}

// slowRequests sends n requests for /slow, each on its own connection (HTTP/1.1; all connected
// before the first is sent, so that the clients are admitted before upstream connections fill
// the room) or as streams of one HTTP/2 connection, and sends each response to codes.
func slowRequests(t *testing.T, p *engineProxy, e engine, n int, codes chan<- *http.Response) {
	t.Helper()
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	if !e.h2 {
		conns := make([]net.Conn, n)
		readers := make([]*bufio.Reader, n)
		for i := range n {
			conns[i], readers[i] = p.dial(t)
		}
		for i, c := range conns {
			fmt.Fprint(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
			wg.Go(func() { codes <- readAll(readers[i]) })
		}
		return
	}
	cc, scheme := dialH2Conn(t, p)
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest("GET", scheme+"://a/slow", nil)
			resp, err := cc.RoundTrip(req)
			if err != nil {
				codes <- &http.Response{Header: http.Header{}}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp
		})
	}
}

// readAll reads one response from br, body included (status 0 when none came).
func readAll(br *bufio.Reader) *http.Response {
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return &http.Response{StatusCode: 0, Header: http.Header{}}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// A local EMFILE or ENFILE from dialing (the process's own, or the budget's) is shed with 503
// and Retry-After on every mapping, the core's and net/http's, not 502.
func TestLocalDialFailureIsShed(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE} {
		err := fmt.Errorf("dial 10.0.0.1:80: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)})
		if code, _, extra := upstreamCode(err); code != 503 || len(extra) == 0 {
			t.Errorf("core, %v: %d %q, want 503 with Retry-After", errno, code, extra)
		}
		w := httptest.NewRecorder()
		(&Server{}).proxyError(w, httptest.NewRequest("GET", "/", nil), fmt.Errorf("forward: %w", err))
		if w.Code != 503 || w.Header().Get("Retry-After") == "" {
			t.Errorf("net/http, %v: %d (Retry-After %q), want 503 with Retry-After", errno, w.Code, w.Header().Get("Retry-After"))
		}
	}
	if code, _, _ := upstreamCode(errors.New("connection refused")); code != 502 {
		t.Errorf("a backend's refusal: %d, want 502", code)
	}
}
