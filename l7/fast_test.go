package l7

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
)

// proxyFor serves a one-route proxy in front of addr.
func proxyFor(t *testing.T, addr string, extra string) (*Server, string) {
	t.Helper()
	return startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]%s}]
`, addr, extra))
}

// dialProxy opens a raw client connection with a deadline.
func dialProxy(t *testing.T, base string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := dialBase(base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// readResponse reads one response from a raw connection (net/http's parser as the judge).
func readResponse(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	resp.Body.Close()
	return resp, string(body)
}

// rawBackend accepts connections and runs serve on each; it is a backend that can misbehave.
func rawBackend(t *testing.T, serve func(c net.Conn)) (string, *atomic.Int64) {
	t.Helper()
	return rawBackendAt(t, "127.0.0.1:0", serve)
}

// rawBackendAt is rawBackend listening at addr.
func rawBackendAt(t testing.TB, addr string, serve func(c net.Conn)) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conns := new(atomic.Int64)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				serve(c)
			}()
		}
	}()
	return ln.Addr().String(), conns
}

// Content-Length and chunked bodies both ways, HEAD, 204 and 304 keep their framing, on one
// keep-alive client connection, all on the fast path.
func TestFastPathFraming(t *testing.T) { onEveryEngine(t, testFastPathFraming) }

func testFastPathFraming(t *testing.T) {
	b := startBackend(t, "f", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/chunked":
			w.Write([]byte("part1-"))
			w.(http.Flusher).Flush() // forces a chunked response
			fmt.Fprintf(w, "%s %s %d te=%v", r.Method, r.URL.Path, len(body), r.TransferEncoding)
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.WriteHeader(http.StatusNotModified)
		default:
			w.Header().Set("Content-Length", fmt.Sprint(len(body)+10))
			fmt.Fprintf(w, "%s", body)
			fmt.Fprintf(w, "%10s", r.Method)
		}
	}))
	s, base := proxyFor(t, b.addr, "")
	c, br := dialProxy(t, base)
	before := s.served.core()

	fmt.Fprint(c, "POST /cl HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello")
	resp, body := readResponse(t, br, "POST")
	if resp.StatusCode != 200 || body != "hello      POST" || resp.ContentLength != 15 {
		t.Errorf("CL: %d %q length %d", resp.StatusCode, body, resp.ContentLength)
	}
	fmt.Fprint(c, "POST /chunked HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4;x=y\r\ndefg\r\n0\r\n\r\n")
	resp, body = readResponse(t, br, "POST")
	if body != "part1-POST /chunked 7 te=[chunked]" || len(resp.TransferEncoding) != 1 {
		t.Errorf("chunked: %q te=%v", body, resp.TransferEncoding)
	}
	fmt.Fprint(c, "HEAD /cl HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, body = readResponse(t, br, "HEAD")
	if resp.StatusCode != 200 || body != "" {
		t.Errorf("HEAD: %d %q", resp.StatusCode, body)
	}
	for _, code := range []int{204, 304} {
		fmt.Fprintf(c, "GET /%d HTTP/1.1\r\nHost: a\r\n\r\n", code)
		resp, body = readResponse(t, br, "GET")
		if resp.StatusCode != code || body != "" {
			t.Errorf("%d: %d %q", code, resp.StatusCode, body)
		}
	}
	// The connection is still in step after all of them.
	fmt.Fprint(c, "GET /last HTTP/1.1\r\nHost: a\r\n\r\n")
	if resp, body = readResponse(t, br, "GET"); body != "       GET" || resp.Header.Get("Via") != "1.1 switchyard" {
		t.Errorf("last: %q via %q", body, resp.Header.Get("Via"))
	}
	if got := s.served.core() - before; got != 6 {
		t.Errorf("fast path served %d requests, want 6", got)
	}
}

// Pipelined requests in one write get their responses in order.
func TestFastPathPipelining(t *testing.T) { onEveryEngine(t, testFastPathPipelining) }

func testFastPathPipelining(t *testing.T) {
	b := startBackend(t, "p", nil)
	_, base := proxyFor(t, b.addr, "")
	c, br := dialProxy(t, base)
	fmt.Fprint(c, "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n"+
		"POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nxyz"+
		"POST /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nq\r\n0\r\n\r\n"+
		"GET /4 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
	want := []string{"p GET /1 body=0", "p POST /2 body=3", "p POST /3 body=1", "p GET /4 body=0"}
	for i, w := range want {
		resp, body := readResponse(t, br, "GET")
		if body != w {
			t.Errorf("response %d: %q, want %q", i+1, body, w)
		}
		if i == 3 && !resp.Close {
			t.Errorf("Connection: close was not answered with close")
		}
	}
	if n, err := br.ReadByte(); err != io.EOF {
		t.Errorf("connection still open after Connection: close (%v %v)", n, err)
	}
}

// A backend without Content-Length or chunking (the body ends when it closes) reaches the client
// chunked on a connection that stays usable; a backend cutting a body short cuts the client.
func TestFastPathUpstreamClosing(t *testing.T) { onEveryEngine(t, testFastPathUpstreamClosing) }

func testFastPathUpstreamClosing(t *testing.T) {
	addr, _ := rawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.URL.Path == "/short" {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly-this")
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil-")
		time.Sleep(20 * time.Millisecond)
		io.WriteString(c, "close")
	})
	_, base := proxyFor(t, addr, "")
	c, br := dialProxy(t, base)
	for i := 0; i < 2; i++ {
		fmt.Fprint(c, "GET /eof HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, body := readResponse(t, br, "GET")
		if body != "until-close" || len(resp.TransferEncoding) == 0 {
			t.Errorf("close-delimited %d: %q te=%v", i, body, resp.TransferEncoding)
		}
	}
	fmt.Fprint(c, "GET /short HTTP/1.1\r\nHost: a\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(resp.Body); err == nil {
		t.Errorf("truncated upstream body reached the client as complete: %q", got)
	}
}

// A pooled connection the backend closed while idle is noticed on reuse and the request goes
// out again on a new connection, invisibly to the client.
func TestFastPathStalePooledConnection(t *testing.T) {
	onEveryEngine(t, testFastPathStalePooledConnection)
}

func testFastPathStalePooledConnection(t *testing.T) {
	addr, conns := rawBackend(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		// Answers keep-alive, then closes right away, like a backend's idle timeout firing.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		time.Sleep(10 * time.Millisecond)
	})
	_, base := proxyFor(t, addr, "")
	for i := 0; i < 3; i++ {
		resp, body := get(t, testClient, "GET", base+"/x", nil)
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if conns.Load() < 3 {
		t.Errorf("backend saw %d connections; the closed ones were reused?", conns.Load())
	}
}

// A client that goes away in the middle of its body: the backend sees a broken body (never a
// complete one), and the proxy goes on serving.
func TestFastPathClientClosesMidBody(t *testing.T) { onEveryEngine(t, testFastPathClientClosesMidBody) }

func testFastPathClientClosesMidBody(t *testing.T) {
	got := make(chan string, 1)
	b := startBackend(t, "m", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/upload" {
			got <- fmt.Sprintf("%d %v", n, err != nil)
		}
		fmt.Fprint(w, "fine")
	}))
	_, base := proxyFor(t, b.addr, "")
	c, _ := dialProxy(t, base)
	fmt.Fprint(c, "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n"+strings.Repeat("x", 1000))
	time.Sleep(100 * time.Millisecond)
	c.Close()
	select {
	case g := <-got:
		if g != "1000 true" {
			t.Errorf("backend read %s, want 1000 bytes then an error", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("backend still waiting for the body of a client that left")
	}
	if resp, body := get(t, testClient, "GET", base+"/after", nil); resp.StatusCode != 200 || body != "fine" {
		t.Errorf("after: %d %q", resp.StatusCode, body)
	}
}

// Large bodies stream both ways intact, with Content-Length and chunked.
func TestFastPathLargeBodies(t *testing.T) { onEveryEngine(t, testFastPathLargeBodies) }

func testFastPathLargeBodies(t *testing.T) {
	b := startBackend(t, "l", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		w.Header().Set("X-Sum", fmt.Sprintf("%x", h.Sum(nil)))
		w.Header().Set("X-Len", fmt.Sprint(n))
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", fmt.Sprint(4<<20))
		}
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for i := 0; i < 64; i++ {
			w.Write(chunk)
		}
	}))
	s, base := proxyFor(t, b.addr, "")
	up := bytes.Repeat([]byte("switchyard"), 600_000)
	sum := fmt.Sprintf("%x", sha256.Sum256(up))
	want := fmt.Sprintf("%x", sha256.Sum256(bytes.Repeat([]byte("0123456789abcdef"), 4096*64)))
	before := s.served.core()
	for _, q := range []string{"", "?chunked=1"} {
		// bytes.Reader gives a Content-Length; the pipe reader forces a chunked upload.
		var body io.Reader = bytes.NewReader(up)
		if q != "" {
			pr, pw := io.Pipe()
			go func() { pw.Write(up); pw.Close() }()
			body = pr
		}
		req, _ := http.NewRequest("POST", base+"/big"+q, body)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Header.Get("X-Sum") != sum || resp.Header.Get("X-Len") != fmt.Sprint(len(up)) {
			t.Errorf("%s upload arrived as %s bytes", q, resp.Header.Get("X-Len"))
		}
		if fmt.Sprintf("%x", sha256.Sum256(got)) != want {
			t.Errorf("%s download: %d bytes, wrong content", q, len(got))
		}
	}
	if s.served.core()-before != 2 {
		t.Errorf("large bodies did not take the fast path")
	}
}

// What the fast path does not handle still works through net/http: HTTP/1.0, Expect, a bad
// path, an unknown route.
func TestFastPathFallbacks(t *testing.T) { onEveryEngine(t, testFastPathFallbacks) }

func testFastPathFallbacks(t *testing.T) {
	b := startBackend(t, "fb", nil)
	s, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, match: {path: {prefix: /ok}}}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
	cases := []struct{ raw, want string }{
		{"GET /ok HTTP/1.0\r\nHost: a\r\n\r\n", "200"},
		{"POST /ok HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi", "100"},
		{"GET /ok/%2e%2e/%2fetc HTTP/1.1\r\nHost: a\r\n\r\n", "400"},
		{"GET /nowhere HTTP/1.1\r\nHost: a\r\n\r\n", "404"},
		{"GET /ok HTTP/1.1\r\n\r\n", "400"}, // no Host
	}
	before := s.served.core()
	for _, c := range cases {
		if line := rawExchange(t, base, c.raw); !strings.Contains(line, " "+c.want+" ") {
			t.Errorf("%q: got %q, want %s", c.raw, line, c.want)
		}
	}
	if s.served.core() != before {
		t.Errorf("the fast path answered requests it should have handed over")
	}
}

// The fast path refuses a smuggling shape with exactly the guard's bytes, after answering the
// good request pipelined before it, and the backend never sees the refused one.
func TestFastPathRefusalMatchesGuard(t *testing.T) { onEveryEngine(t, testFastPathRefusalMatchesGuard) }

func testFastPathRefusalMatchesGuard(t *testing.T) {
	b := startBackend(t, "g", nil)
	s, base := proxyFor(t, b.addr, "")
	c, br := dialProxy(t, base)
	before := s.served.core()
	fmt.Fprint(c, "GET /ok HTTP/1.1\r\nHost: a\r\n\r\n"+
		"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	if _, body := readResponse(t, br, "GET"); body != "g GET /ok body=0" {
		t.Fatalf("first response %q", body)
	}
	rest, _ := io.ReadAll(br)
	var want bytes.Buffer
	h1.WriteRejection(&want, &h1.Rejection{Status: 400, Reason: "Content-Length together with Transfer-Encoding"})
	if string(rest) != want.String() {
		t.Errorf("refusal:\n%q\nwant the guard's:\n%q", rest, want.String())
	}
	if b.hits.Load() != 1 || s.served.core()-before != 1 {
		t.Errorf("backend saw %d requests, fast path served %d; want 1 and 1", b.hits.Load(), s.served.core()-before)
	}
}
