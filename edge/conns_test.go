package edge

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// TestMaxConnections: over max_connections a new client gets 503 and a close; a connection
// handed over to net/http (a miss) gives its place back when it closes.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "ok")
	})
	e := newEdge(t, o.URL, func(c *Config) { c.MaxConnections = 2 })
	dial := func() net.Conn {
		c, err := net.Dial("tcp", e.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ask := func(c net.Conn) (*http.Response, error) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	a := dial()
	if resp, err := ask(a); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first connection: %v %v", resp, err)
	}
	b := dial()
	if resp, err := ask(b); err != nil || resp.StatusCode != 200 {
		t.Fatalf("second connection: %v %v", resp, err)
	}
	resp, err := ask(dial())
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("third connection over max_connections 2: %v %v", resp, err)
	}
	if e.Stats().ConnsRefused.Load() != 1 {
		t.Fatalf("refused counter %d", e.Stats().ConnsRefused.Load())
	}
	a.Close() // its place comes back once the edge sees the close
	testutil.Eventually(t, 10*time.Second, func() bool {
		resp, err := ask(dial())
		return err == nil && resp.StatusCode == 200
	}, "the closed connection's place never came back")
}

// TestSlowReaderIsCut: a client that reads its response too slowly is cut off after
// client_timeout, on the fast path (a memory hit) and on net/http (a miss), with a reset.
func TestSlowReaderIsCut(t *testing.T) {
	t.Parallel()
	const size = 8 << 20 // more than the socket buffers on both sides hold (the client asks for a small one)
	body := strings.Repeat("x", size)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, body)
	})
	e := newEdge(t, o.URL, func(c *Config) {
		c.ClientTimeout = Duration(3 * time.Second) // room for the fill under -race
		c.Memory.MaxObjectBytes = 64 << 20
		c.Memory.MaxBytes = 256 << 20
	})
	for _, path := range []string{"/miss", "/hit"} {
		if path == "/hit" {
			if r := get(t, e.URL()+path); r.status != 200 || len(r.body) != size {
				t.Fatalf("fill %s: %d %d bytes", path, r.status, len(r.body))
			}
			settle(t, e)
		}
		c, err := net.DialTCP("tcp", nil, mustResolve(t, e.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadBuffer(4096)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: h\r\n\r\n", path)
		start := time.Now()
		// A slow reader: a small receive buffer, 4 KB every 100 ms. The edge must cut it
		// (a reset, so what the kernel still queued is dropped too) well before the deadline.
		buf := make([]byte, 4096)
		var got int
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		for {
			n, err := c.Read(buf)
			got += n
			if errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("%s: still connected after 20 s with %d bytes read; client_timeout 3s did not cut it", path, got)
			}
			if err != nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if got >= size {
			t.Fatalf("%s: read the whole body (%d bytes); the slow reader was not cut", path, got)
		}
		t.Logf("%s: cut after %v with %d of %d bytes read", path, time.Since(start).Round(time.Millisecond), got, size)
	}
}

func mustResolve(t *testing.T, addr string) *net.TCPAddr {
	a, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
