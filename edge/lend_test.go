package edge

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestFastPathKeepsConnectionAfterMiss: on one keep-alive connection, misses of every kind
// (a fetch with a known length, a chunked stream, an uncacheable pass, a HEAD) are answered on
// the fast connection itself, none lent to net/http, and each hit after them is the fast path's
// again; a miss with Connection: close closes the connection.
func TestFastPathKeepsConnectionAfterMiss(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/hit":
			w.Header().Set("Cache-Control", "max-age=300")
			io.WriteString(w, strings.Repeat("h", 480))
		case strings.HasPrefix(r.URL.Path, "/chunked"):
			w.Header().Set("Cache-Control", "max-age=300")
			io.WriteString(w, "part one ")
			w.(http.Flusher).Flush() // no Content-Length: the edge streams it chunked
			io.WriteString(w, "part two")
		case strings.HasPrefix(r.URL.Path, "/pass"):
			w.Header().Set("Cache-Control", "no-store")
			io.WriteString(w, "uncacheable")
		default:
			w.Header().Set("Cache-Control", "max-age=300")
			io.WriteString(w, "fetched "+r.URL.Path)
		}
	})
	e := newEdge(t, o.URL, nil)
	warm(t, e, "/hit")
	c, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	const host = "Host: cache.test\r\n"
	send := func(method, path, extra string) (*http.Response, string) {
		t.Helper()
		if _, err := io.WriteString(c, method+" "+path+" HTTP/1.1\r\n"+host+extra+"\r\n"); err != nil {
			t.Fatal(err)
		}
		return parsed(t, br, method)
	}
	hit := func(step string) {
		t.Helper()
		before := e.stats.FastPath.Load()
		resp, body := send("GET", "/hit", "")
		if resp.Header.Get("X-Cache") != Hit || len(body) != 480 {
			t.Fatalf("%s: hit answered %d %q, %d bytes", step, resp.StatusCode, resp.Header.Get("X-Cache"), len(body))
		}
		if e.stats.FastPath.Load()-before != 1 {
			t.Fatalf("%s: the hit was not answered on the fast path", step)
		}
	}
	lent, own := e.stats.Lent.Load(), e.stats.FastMiss.Load()
	hit("first")
	misses := []struct{ method, path, body string }{
		{"GET", "/a", "fetched /a"},
		{"GET", "/chunked", "part one part two"},
		{"GET", "/pass", "uncacheable"},
		{"HEAD", "/b", ""},
	}
	for i, m := range misses {
		resp, body := send(m.method, m.path, "")
		if resp.StatusCode != 200 || resp.Header.Get("X-Cache") != Miss || body != m.body || resp.Close {
			t.Fatalf("miss %s %s: %d %q %q close=%v", m.method, m.path, resp.StatusCode, resp.Header.Get("X-Cache"), body, resp.Close)
		}
		hit("after miss " + m.path)
		if got := e.stats.FastMiss.Load() - own; got != int64(i+1) {
			t.Fatalf("after %s: %d misses answered on the fast connection, want %d", m.path, got, i+1)
		}
		if got := e.stats.Lent.Load() - lent; got != 0 {
			t.Fatalf("after %s: %d requests lent to net/http, want none", m.path, got)
		}
	}
	settle(t, e)
	before := e.stats.FastPath.Load()
	if resp, body := send("GET", "/chunked", ""); resp.Header.Get("X-Cache") != Hit || body != "part one part two" {
		t.Fatalf("stored stream: %q %q", resp.Header.Get("X-Cache"), body)
	}
	if e.stats.FastPath.Load()-before != 1 {
		t.Fatal("the stored stream was not a fast-path hit")
	}
	resp, body := send("GET", "/c", "Connection: close\r\n")
	if resp.Header.Get("X-Cache") != Miss || body != "fetched /c" || !resp.Close {
		t.Fatalf("miss with Connection: close: %q %q close=%v", resp.Header.Get("X-Cache"), body, resp.Close)
	}
	if n, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection still open after Connection: close (read %q, %v)", n, err)
	}
}

// TestFastPathKeepsPooledClientAfterMisses: a keep-alive client that mixes hits and misses
// keeps one connection, and every hit on it is the fast path's.
func TestFastPathKeepsPooledClientAfterMisses(t *testing.T) {
	o := fastOrigin(t)
	e := newEdge(t, o.URL, nil)
	warm(t, e, "/obj")
	dials := 0
	tr := &http.Transport{
		MaxIdleConnsPerHost: 1,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials++
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	before := e.stats.FastPath.Load()
	for i := 0; i < 20; i++ {
		path := "/obj"
		if i%3 == 2 {
			path = "/other" // no-store at the origin: a miss every time
		}
		req, _ := http.NewRequest("GET", e.URL()+path, nil)
		req.Host = "cache.test"
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("request %d %s: %d", i, path, resp.StatusCode)
		}
	}
	if dials != 1 {
		t.Fatalf("the client dialled %d times, want one connection for all", dials)
	}
	if got := e.stats.FastPath.Load() - before; got != 14 {
		t.Fatalf("fast path answered %d of the 14 hits", got)
	}
}
