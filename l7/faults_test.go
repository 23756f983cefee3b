package l7

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// Faults found in a soak with injected failures, each with a test that failed on the
// code before the request core.

// Descriptor exhaustion must not take healthy backends down. The proxy runs in a subprocess
// whose descriptor limit is lowered to 128 (soft and hard); health checks need a new socket for
// every probe (the backend closes after each answer). A flood of 300 idle clients must leave a
// keep-alive client served with 200 and the backends up; clients over the cap get 503.
func TestDescriptorExhaustionKeepsBackendsUp(t *testing.T) {
	if os.Getenv("L7_FD_CHILD") != "" {
		t.Skip("in the child")
	}
	forEachEngine(t, testDescriptorExhaustion)
}

func testDescriptorExhaustion(t *testing.T, e engine) {
	b := startBackend(t, "fd", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			w.Header().Set("Connection", "close") // every probe needs a new socket
		}
		fmt.Fprint(w, "fd ok")
	}))
	cfg := fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools:
  - name: p
    backends: [{address: %q}]
    health: {interval: 50ms, timeout: 40ms, fall: 2, rise: 1}
    outlier: {consecutive_errors: 2, ejection_time: 1m}
`, e.backend(b.addr))
	cmd := exec.Command(os.Args[0], "-test.run=^TestDescriptorExhaustionChild$", "-test.v")
	cmd.Env = append(os.Environ(), "L7_FD_CHILD="+e.name, "L7_FD_CONFIG="+cfg)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.StopChild(cmd, stdin, 10*time.Second) })
	addr := childAddr(t, stdout)

	ka, err := dialBase(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ka.Close()
	kbr := bufio.NewReader(ka)
	ask := func() int {
		ka.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprint(ka, "GET /ka HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(kbr, nil)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := ask(); code != 200 {
		t.Fatalf("before the flood: %d", code)
	}
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for range 300 {
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(strings.TrimPrefix(addr, "https://"), "http://"), time.Second)
		if err != nil {
			break
		}
		flood = append(flood, c)
	}
	bad := 0
	for range 40 { // 2 s: 40 health checks per backend, each needing a descriptor
		if code := ask(); code != 200 {
			bad++
		}
		time.Sleep(50 * time.Millisecond)
	}
	if bad > 0 {
		t.Errorf("keep-alive client got %d of 40 non-200 answers during a flood of %d idle clients", bad, len(flood))
	}
	// Clients over the cap were answered 503 and closed.
	shed := 0
	for _, c := range flood {
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		buf := make([]byte, 64)
		if n, _ := c.Read(buf); strings.Contains(string(buf[:n]), " 503 ") {
			shed++
		}
	}
	if shed == 0 {
		t.Errorf("no client over the connection cap got 503")
	}
}

// childAddr reads the proxy address the child prints.
func childAddr(t *testing.T, r io.Reader) string {
	t.Helper()
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		re := regexp.MustCompile(`L7ADDR (\S+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
			}
		}
	}()
	select {
	case a := <-found:
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("the child proxy did not start")
	}
	return ""
}

// TestDescriptorExhaustionChild is the proxy of TestDescriptorExhaustionKeepsBackendsUp, run
// in a subprocess with a descriptor limit of 128.
func TestDescriptorExhaustionChild(t *testing.T) {
	if os.Getenv("L7_FD_CHILD") == "" {
		t.Skip("runs as the subprocess of TestDescriptorExhaustionKeepsBackendsUp")
	}
	lim := syscall.Rlimit{Cur: 128, Max: 128}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	for _, e := range engines {
		if e.name == os.Getenv("L7_FD_CHILD") {
			curEngine = e
		}
	}
	_, base := startProxy(t, os.Getenv("L7_FD_CONFIG"))
	fmt.Printf("L7ADDR %s\n", base)
	io.Copy(io.Discard, os.Stdin) // until the parent is done
}

// evLoop.forget swapped the last connection into the vacated one's place but never cleared the
// slot at the end: after a flood closed, the connections stayed reachable. Live heap after a
// flood of 3,000 connections (each with a request served) must come back near the baseline.
func TestLoopFloodReleasesMemory(t *testing.T) {
	b := startBackend(t, "mem", nil)
	// Few idle upstream connections, so that what stays is the client side.
	s, base := proxyFor(t, b.addr, ", max_idle_per_backend: 2")
	if !s.startLoops() {
		t.Skip("no event loops here")
	}
	addr := strings.TrimPrefix(base, "http://")
	heap := func() uint64 {
		var ms runtime.MemStats
		for range 3 {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// Warm up (one connection), then the baseline.
	c, br := dialProxy(t, base)
	fmt.Fprint(c, "GET /w HTTP/1.1\r\nHost: a\r\n\r\n")
	readResponse(t, br, "GET")
	before := heap()
	const n = 3000
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		fmt.Fprint(c, "GET /f HTTP/1.1\r\nHost: a\r\n\r\n")
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	testutil.Eventually(t, 5*time.Second, func() bool { return loopConns(s) <= 1 }, "the loops did not close the flood (%d connections left)", func() any { return loopConns(s) })
	after := heap()
	t.Logf("live heap %d KiB before, %d KiB after %d connections closed", before>>10, after>>10, n)
	if after > before+4<<20 {
		t.Errorf("live heap %d KiB after the flood closed, %d KiB before: closed connections stay in memory", after>>10, before>>10)
	}
}

func loopConns(s *Server) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, l := range s.loops {
		n += l.count.Load()
	}
	return n
}

// A reload that adds retries must not move keep-alive connections off the event loops for good:
// after reloads adding and then removing retries, the same connections are served by the loops
// and none was handed to net/http.
func TestReloadWithRetriesKeepsConnectionsOnLoops(t *testing.T) {
	b1, b2 := startBackend(t, "r1", nil), startBackend(t, "r2", nil)
	conf := func(retry string) string {
		return fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p%s}]
pools: [{name: p, backends: [{address: %q}, {address: %q}]}]
`, retry, b1.addr, b2.addr)
	}
	s, base := startProxy(t, conf(""))
	if !s.startLoops() {
		t.Skip("no event loops here")
	}
	const conns = 8
	var cs []net.Conn
	var brs []*bufio.Reader
	for range conns {
		c, br := dialProxy(t, base)
		cs, brs = append(cs, c), append(brs, br)
	}
	round := func(phase string) {
		for i, c := range cs {
			fmt.Fprintf(c, "GET /%s/%d HTTP/1.1\r\nHost: a\r\n\r\n", phase, i)
			if resp, body := readResponse(t, brs[i], "GET"); resp.StatusCode != 200 || !strings.Contains(body, "/"+phase+"/"+strconv.Itoa(i)) {
				t.Fatalf("%s %d: %d %q", phase, i, resp.StatusCode, body)
			}
		}
	}
	reload := func(text string) {
		cfg, err := ParseConfig([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	round("before")
	reload(conf(", retry: {attempts: 1, on_status: [503]}"))
	loop := s.served.of(engineLoop)
	round("retries")
	if got := s.served.of(engineLoop) - loop; got != conns {
		t.Errorf("with retries the loops served %d of %d requests", got, conns)
	}
	reload(conf(""))
	loop = s.served.of(engineLoop)
	round("after")
	if got := s.served.of(engineLoop) - loop; got != conns {
		t.Errorf("after the retries were removed the loops served %d of %d requests", got, conns)
	}
	rec := httptest.NewRecorder()
	s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if strings.Contains(rec.Body.String(), `switchyard_l7_loop_handoffs_total{to="http"}`) {
		t.Errorf("connections were handed to net/http:\n%s", grepLines(rec.Body.String(), "handoffs"))
	}
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var _ atomic.Int64

// The connection count behind max_connections comes back to zero whatever served a connection:
// the core, net/http after a hand-over (HTTP/1.0 here), HTTP/2 over TLS or h2c. A count that
// leaked would end with every new client refused.
func TestConnectionCountReturnsToZero(t *testing.T) { onEveryEngine(t, testConnectionCount) }

func testConnectionCount(t *testing.T) {
	b := startBackend(t, "cnt", nil)
	s, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
	for _, raw := range []string{"GET /core HTTP/1.1\r\nHost: a\r\n\r\n", "GET /http10 HTTP/1.0\r\nHost: a\r\n\r\n"} {
		if line := rawExchange(t, base, raw); !strings.Contains(line, " 200 ") {
			t.Errorf("%q: %q", raw, line)
		}
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Protocols: new(http.Protocols)} //nolint:gosec // test certificate
	if curEngine.tls {
		tr.Protocols.SetHTTP2(true)
	} else {
		tr.Protocols.SetUnencryptedHTTP2(true)
	}
	resp, _ := get(t, &http.Client{Transport: tr}, "GET", base+"/h2", nil)
	if resp.ProtoMajor != 2 {
		t.Errorf("h2 request served as %s", resp.Proto)
	}
	tr.CloseIdleConnections()
	testutil.Eventually(t, 5*time.Second, func() bool { return s.conns.Clients() == 0 }, "the connection count did not return to zero")
}

// A local resource failure (out of descriptors, memory, socket buffers) is the proxy's own,
// never the backend's: passive ejection does not count it, while a refused connection counts.
func TestLocalResourceFailureIsNotCountedAgainstBackend(t *testing.T) {
	b := startBackend(t, "lr", nil)
	s, _ := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}], outlier: {consecutive_errors: 2, ejection_time: 1m, max_ejected_percent: 100}}]
`, b.addr))
	p := s.state.Load().pools["p"]
	be := p.backends[0]
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS} {
		for range 3 {
			s.passive(p, be, false, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", errno)})
		}
	}
	if be.Ejected() {
		t.Fatal("local resource failures ejected a healthy backend")
	}
	for range 2 {
		s.passive(p, be, false, &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	}
	if !be.Ejected() {
		t.Error("refused connections did not eject the backend")
	}
}
