//go:build linux

package l7

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TLS HTTP/1.1 connections are served by the event loops once handshaken
// (engine_loop_tls_linux.go). On the code before, every one of these requests was served by
// the goroutine engine (the loops served none).

// tlsLoopProxy starts a TLS proxy (loops on) in front of one backend.
func tlsLoopProxy(t *testing.T, h http.Handler) (*engineProxy, *backend) {
	t.Helper()
	b := startBackend(t, "b1", h)
	p := engine{name: "tls", tls: true}.start(t, oneRoute("", b.addr))
	return p, b
}

// readResponses reads n responses from r, returning their bodies.
func readResponses(t *testing.T, r *bufio.Reader, n int) []string {
	t.Helper()
	var bodies []string
	for i := range n {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("response %d: status %d, body error %v", i, resp.StatusCode, err)
		}
		bodies = append(bodies, string(body))
	}
	return bodies
}

func TestTLSKeepAliveOnLoops(t *testing.T) {
	p, _ := tlsLoopProxy(t, nil)
	c, r := p.dial(t)
	before := p.s.served.of(engineLoop)
	for i := range 10 {
		fmt.Fprintf(c, "GET /k%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		if got := readResponses(t, r, 1)[0]; got != fmt.Sprintf("b1 GET /k%d body=0", i) {
			t.Fatalf("request %d answered %q", i, got)
		}
	}
	// The first request is the goroutine engine's (engine_loop_tls_linux.go).
	if got := p.s.served.of(engineLoop) - before; got != 9 {
		t.Fatalf("the event loops served %d of 10 TLS keep-alive requests, want 9", got)
	}
}

// Two requests in one TLS record, and two records in one write: each answered, in order.
func TestTLSPipelinedOnLoops(t *testing.T) {
	p, _ := tlsLoopProxy(t, nil)
	c, r := p.dial(t)
	fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	fmt.Fprintf(c, "GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	got := readResponses(t, r, 3)
	want := []string{"b1 GET /a body=0", "b1 GET /b body=0", "b1 GET /c body=0"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pipelined answers %q, want %q", got, want)
	}
}

// A response of many TLS records, read slowly (the loop's backpressure), arrives whole; the
// connection then serves another request.
func TestTLSLargeResponseOnLoops(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	p, _ := tlsLoopProxy(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", strconv.Itoa(len(big)))
			w.Write(big)
			return
		}
		io.WriteString(w, "small")
	}))
	c, r := p.dial(t)
	fmt.Fprintf(c, "GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	time.Sleep(50 * time.Millisecond) // let the proxy fill the socket and wait for the client
	if got := readResponses(t, r, 1)[0]; got != string(big) {
		t.Fatalf("large response: %d bytes, want %d intact", len(got), len(big))
	}
	fmt.Fprintf(c, "GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
	if got := readResponses(t, r, 1)[0]; got != "small" {
		t.Fatalf("after the large response: %q", got)
	}
}

// What the loops do not serve goes, over the same TLS session, to the goroutine engine (a
// streamed upload) or to net/http (HTTP/1.0); each still answers, and so do requests after.
func TestTLSHandOffFromLoops(t *testing.T) {
	p, b := tlsLoopProxy(t, nil)
	onLoop := func(c io.Writer, r *bufio.Reader) {
		t.Helper()
		before := p.s.served.of(engineLoop)
		fmt.Fprintf(c, "GET /first HTTP/1.1\r\nHost: x\r\n\r\n") // the goroutine engine's
		fmt.Fprintf(c, "GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
		readResponses(t, r, 2)
		if got := p.s.served.of(engineLoop) - before; got != 1 {
			t.Fatalf("the loops served %d requests, want 1 (the second)", got)
		}
	}
	c, r := p.dial(t)
	onLoop(c, r)
	// A body that is not all there with its head streams on the goroutine engine.
	fmt.Fprintf(c, "POST /up HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n12345")
	time.Sleep(50 * time.Millisecond)
	fmt.Fprintf(c, "67890")
	if got := readResponses(t, r, 1)[0]; got != "b1 POST /up body=10" {
		t.Fatalf("streamed upload answered %q", got)
	}
	fmt.Fprintf(c, "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
	if got := readResponses(t, r, 1)[0]; got != "b1 GET /after body=0" {
		t.Fatalf("request after the upload answered %q", got)
	}

	c, r = p.dial(t)
	onLoop(c, r)
	fmt.Fprintf(c, "GET /old HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n") // net/http's
	if got := readResponses(t, r, 1)[0]; got != "b1 GET /old body=0" {
		t.Fatalf("HTTP/1.0 request answered %q", got)
	}
	fmt.Fprintf(c, "GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	if got := readResponses(t, r, 1)[0]; got != "b1 GET /last body=0" {
		t.Fatalf("last request answered %q", got)
	}
	if n, err := r.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Fatalf("after Connection: close the proxy sent %d more bytes (%v)", n, err)
	}
	if b.hits.Load() != 8 {
		t.Fatalf("backend saw %d requests, want 8", b.hits.Load())
	}
}

// A client that sends close_notify right after a request on a loop (no FIN: tls.Conn.CloseWrite
// does not shut the socket) gets its answer, then the end. Before the fix the loop read the
// request and the alert in one go, served the request and waited for a socket event that never
// came.
func TestTLSClientCloseOnLoops(t *testing.T) {
	p, _ := tlsLoopProxy(t, nil)
	c, r := p.dial(t)
	fmt.Fprintf(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	readResponses(t, r, 2)
	fmt.Fprintf(c, "GET /c HTTP/1.1\r\nHost: x\r\n\r\n")
	c.(interface{ CloseWrite() error }).CloseWrite() // TLS close_notify only
	if got := readResponses(t, r, 1)[0]; got != "b1 GET /c body=0" {
		t.Fatalf("answer after the client closed its side: %q", got)
	}
	if _, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the last answer: %v, want EOF", err)
	}
}
