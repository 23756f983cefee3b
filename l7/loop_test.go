//go:build linux

package l7

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// Keep-alive clients are dealt out over every loop and served there, not handed over.
func TestLoopServesAndSpreadsConnections(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs GOMAXPROCS >= 2 to have two event loops")
	}
	b := startBackend(t, "lp", nil)
	s, base := proxyFor(t, b.addr, "")
	const conns, each = 16, 20
	before := s.served.of(engineLoop)
	var open, wg sync.WaitGroup
	open.Add(conns)
	release := make(chan struct{})
	errs := make(chan error, conns)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, br := dialProxy(t, base)
			for j := 0; j < each; j++ {
				fmt.Fprintf(c, "GET /c%d/%d HTTP/1.1\r\nHost: a\r\n\r\n", i, j)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					errs <- err
					break
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					errs <- fmt.Errorf("connection %d request %d: status %d", i, j, resp.StatusCode)
				}
				if j == 0 {
					open.Done()
				}
			}
			<-release
		}()
	}
	open.Wait()
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	for i, l := range loops {
		if n := l.count.Load(); n == 0 {
			t.Errorf("loop %d owns no connection of %d", i, conns)
		}
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := s.served.of(engineLoop) - before; got != conns*each {
		t.Errorf("loops served %d requests, want %d", got, conns*each)
	}
}

// A streamed upload and a backend given by host name leave the loop for the goroutine path,
// with the bytes already read, and are served there.
func TestLoopHandsOverWhatItDoesNotServe(t *testing.T) {
	b := startBackend(t, "ho", nil)
	_, port, _ := net.SplitHostPort(b.addr)
	s, base := proxyFor(t, "localhost:"+port, "")
	loop, fast := s.served.of(engineLoop), s.served.core()
	if resp, body := get(t, http.DefaultClient, "GET", base+"/named", nil); resp.StatusCode != 200 || body != "ho GET /named body=0" {
		t.Errorf("host-name backend: %d %q", resp.StatusCode, body)
	}
	s2, base2 := proxyFor(t, b.addr, "")
	loop2, fast2 := s2.served.of(engineLoop), s2.served.core()
	c, br := dialProxy(t, base2)
	fmt.Fprint(c, "POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 20000\r\n\r\n"+strings.Repeat("u", 1000))
	time.Sleep(20 * time.Millisecond) // the loop sees the head with a partial body
	fmt.Fprint(c, strings.Repeat("u", 19000))
	if _, body := readResponse(t, br, "POST"); body != "ho POST /up body=20000" {
		t.Errorf("streamed upload: %q", body)
	}
	// The connection stays on the goroutine path and keeps serving.
	fmt.Fprint(c, "GET /next HTTP/1.1\r\nHost: a\r\n\r\n")
	if _, body := readResponse(t, br, "GET"); body != "ho GET /next body=0" {
		t.Errorf("after the upload: %q", body)
	}
	if s.served.of(engineLoop) != loop || s.served.core() != fast+1 {
		t.Errorf("host-name backend: loop served %d, fast path %d; want 0 and 1", s.served.of(engineLoop)-loop, s.served.core()-fast)
	}
	if s2.served.of(engineLoop) != loop2 || s2.served.core() != fast2+2 {
		t.Errorf("upload: loop served %d, fast path %d; want 0 and 2", s2.served.of(engineLoop)-loop2, s2.served.core()-fast2)
	}
	rec := httptest.NewRecorder()
	s2.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{`switchyard_l7_loop_handoffs_total{to="fast"} 1`, `switchyard_l7_loop_connections{loop="0"}`} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// A backend that does not answer in time gets 504 from the loop, and the client connection
// stays usable; a client idle past the idle timeout is closed.
func TestTimeouts(t *testing.T) { onEveryEngine(t, testTimeouts) }

func testTimeouts(t *testing.T) {
	addr, _ := rawBackend(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		c.Read(buf)
		time.Sleep(2 * time.Second)
	})
	good := startBackend(t, "ok", nil)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
timeouts: {idle: 700ms}
routes:
  - {name: slow, pool: slow, match: {path: {prefix: /slow}}}
  - {name: ok, pool: ok}
pools:
  - {name: slow, backends: [{address: %q}], timeouts: {header: 300ms}}
  - {name: ok, backends: [{address: %q}]}
`, addr, good.addr))
	c, br := dialProxy(t, base)
	start := time.Now()
	fmt.Fprint(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, _ := readResponse(t, br, "GET")
	if took := time.Since(start); resp.StatusCode != 504 || took < 250*time.Millisecond || took > 1500*time.Millisecond {
		t.Errorf("silent backend: %d after %v, want 504 after about 300ms", resp.StatusCode, took)
	}
	fmt.Fprint(c, "GET /fine HTTP/1.1\r\nHost: a\r\n\r\n")
	if _, body := readResponse(t, br, "GET"); body != "ok GET /fine body=0" {
		t.Errorf("after the 504: %q", body)
	}
	start = time.Now()
	if _, err := br.ReadByte(); err == nil {
		t.Errorf("idle connection got a byte")
	} else if took := time.Since(start); took < 500*time.Millisecond || took > 2*time.Second {
		t.Errorf("idle connection closed after %v, want about 700ms", took)
	}
}

// Shutdown closes idle loop connections at once and lets one in flight finish.
func TestLoopShutdownLetsInFlightFinish(t *testing.T) {
	b := startBackend(t, "sd", nil)
	b.delay.Store(int64(300 * time.Millisecond))
	s, base := proxyFor(t, b.addr, "")
	idle, idleBr := dialProxy(t, base)
	fmt.Fprint(idle, "GET /warm HTTP/1.1\r\nHost: a\r\n\r\n")
	readResponse(t, idleBr, "GET")
	busy, busyBr := dialProxy(t, base)
	fmt.Fprint(busy, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	testutil.Eventually(t, 5*time.Second, func() bool { return backendInfo(s, b.addr).InFlight == 1 }, "the request never reached the backend")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	if _, err := idleBr.ReadByte(); err == nil {
		t.Errorf("idle connection still open during shutdown")
	}
	resp, body := readResponse(t, busyBr, "GET")
	if resp.StatusCode != 200 || body != "sd GET /slow body=0" || !resp.Close {
		t.Errorf("in-flight request: %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), time.Second); err == nil {
		t.Errorf("listener still accepts after shutdown")
	}
}

// A backend that closes right after a keep-alive response (no Connection: close) is not reused:
// the next POST, which could not be replayed, goes out on a new connection and succeeds.
func TestNoReuseOfConnectionBackendShut(t *testing.T) {
	onEveryEngine(t, testNoReuseOfConnectionBackendShut)
}

func testNoReuseOfConnectionBackendShut(t *testing.T) {
	addr, conns := rawBackend(t, func(c net.Conn) {
		buf := make([]byte, 4096)
		if n, _ := c.Read(buf); n > 0 {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	_, base := proxyFor(t, addr, "")
	c, br := dialProxy(t, base)
	for i := 0; i < 3; i++ {
		fmt.Fprint(c, "POST /w HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
		if resp, body := readResponse(t, br, "POST"); resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("POST %d: %d %q", i, resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond) // the backend's FIN arrives while the connection is idle or in use
	}
	if conns.Load() != 3 {
		t.Errorf("backend saw %d connections, want 3 (one per response)", conns.Load())
	}
}
