package l7

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// The end-to-end rules every engine must keep, run once per engine and on the HTTP/2 front end
// (engines_test.go: withH2).

// An upstream that sends one extra, unsolicited response about 50 ms after a real one must never
// shift responses to other clients: an idle upstream that becomes readable is discarded, and a
// response is only ever read for the request just written. Many client connections, each
// request naming itself; every answer must carry the name of its own request.
func TestRuleUnsolicitedUpstreamBytesNeverReachAClient(t *testing.T) {
	forEachEngineAndH2(t, testUnsolicitedUpstreamBytes)
}

// unsolicitedAfter is how long the backend of testUnsolicitedUpstreamBytes waits, quiet, before
// its unsolicited response: longer than any round of the test takes.
const unsolicitedAfter = 300 * time.Millisecond

func testUnsolicitedUpstreamBytes(t *testing.T, e engine) {
	var extras, pending atomic.Int64
	addr, _ := rawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			id := req.URL.Path
			// pending counts connections between a response and their unsolicited one; it rises
			// before the response is written, so a client that has its answer sees it counted.
			pending.Add(1)
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nX-Id: %s\r\n\r\n%s", len(id), id, id)
			// Quiet for unsolicitedAfter after the response (the connection is idle in the
			// proxy's pool): send a response nobody asked for.
			c.SetReadDeadline(time.Now().Add(unsolicitedAfter))
			if _, err := br.Peek(1); errors.Is(err, os.ErrDeadlineExceeded) {
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 12\r\nX-Id: /unsolicited\r\n\r\n/unsolicited")
				extras.Add(1)
			}
			pending.Add(-1)
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
		}
	})
	p := e.start(t, oneRoute("", e.backend(addr)))
	// Rounds in lockstep: every client sends at once (so the proxy holds many upstream
	// connections), then all wait 150 ms, while every pooled connection gets its unsolicited
	// response. Nothing is sent while an unsolicited response is on its way, so any answer that
	// carries another identity is the proxy's doing, not a race with the backend: a round's
	// requests all land well within unsolicitedAfter of each other. (With 50 ms a round on a
	// loaded machine could outlast it, and a request could reach a connection in the instant its
	// backend wrote the unsolicited response: a race no proxy can see, since HTTP/1.1 has no
	// request ids.)
	const clients, rounds = 30, 4
	type client struct {
		c  net.Conn
		br *bufio.Reader
	}
	cs := make([]client, clients)
	for i := range cs {
		cs[i].c, cs[i].br = p.dial(t)
	}
	var wrong, failed atomic.Int64
	for j := range rounds {
		var wg sync.WaitGroup
		for i := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("/c%d/r%d", i, j)
				fmt.Fprintf(cs[i].c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", id)
				resp, err := http.ReadResponse(cs[i].br, nil)
				if err != nil {
					failed.Add(1)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || string(body) != id {
					wrong.Add(1)
					t.Logf("request %s got %d %q", id, resp.StatusCode, body)
				}
			}()
		}
		wg.Wait()
		// Every unsolicited response written (on loopback: already in the proxy's socket) before
		// the next round, however late a loaded machine runs the backend's 50 ms timers; then
		// 150 ms for the proxy to see them.
		testutil.Eventually(t, 10*time.Second, func() bool { return pending.Load() == 0 }, "the backend's unsolicited responses were not all sent")
		time.Sleep(150 * time.Millisecond)
	}
	const each = rounds
	if extras.Load() == 0 {
		t.Fatalf("the backend never sent an unsolicited response; the test proves nothing")
	}
	if wrong.Load() > 0 || failed.Load() > 0 {
		t.Errorf("%d of %d responses carried another request's identity (or an error status), %d connections failed; %d unsolicited responses sent",
			wrong.Load(), clients*each, failed.Load(), extras.Load())
	}
}

// Keep-alive reuse: sequential requests on one client connection reuse one upstream connection.
func TestRuleKeepAliveReusesUpstream(t *testing.T) { forEachEngineAndH2(t, testKeepAliveReuse) }

func testKeepAliveReuse(t *testing.T, e engine) {
	addr, conns := rawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(req.URL.Path), req.URL.Path)
		}
	})
	p := e.start(t, oneRoute("", e.backend(addr)))
	c, br := p.dial(t)
	for i := range 10 {
		fmt.Fprintf(c, "GET /k%d HTTP/1.1\r\nHost: a\r\n\r\n", i)
		if _, body := readResponse(t, br, "GET"); body != fmt.Sprintf("/k%d", i) {
			t.Fatalf("request %d: %q", i, body)
		}
	}
	// On TLS the first request is served by the goroutine engine (its pool), the rest by an
	// event loop (engine_loop_tls_linux.go): one upstream connection each.
	want := int64(1)
	if e.tls && !e.noLoops && !e.h2 {
		want = 2
	}
	if n := conns.Load(); n != want {
		t.Errorf("10 keep-alive requests used %d upstream connections, want %d", n, want)
	}
}

// Bytes beyond a response (more than its Content-Length) mean the upstream is out of step: its
// connection is closed, and the next request is answered on a new one, never from those bytes.
func TestRuleBytesBeyondAResponseCloseTheUpstream(t *testing.T) {
	forEachEngineAndH2(t, testBytesBeyondResponse)
}

func testBytesBeyondResponse(t *testing.T, e engine) {
	addr, conns := rawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			id := req.URL.Path
			// One write: the response, then a second response nobody asked for.
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%sHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nextra", len(id), id)
		}
	})
	p := e.start(t, oneRoute("", e.backend(addr)))
	c, br := p.dial(t)
	for i := range 3 {
		id := fmt.Sprintf("/b%d", i)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", id)
		if resp, body := readResponse(t, br, "GET"); resp.StatusCode != 200 || body != id {
			t.Fatalf("request %d: %d %q, want %q", i, resp.StatusCode, body, id)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("backend saw %d connections for 3 requests; one with stray bytes was reused", n)
	}
}
