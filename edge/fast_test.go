package edge

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fastOrigin serves the objects the fast-path tests cache, each shaped to exercise one part of
// the rendered head.
func fastOrigin(t *testing.T) *testOrigin {
	small := strings.Repeat("s", 480)
	big := strings.Repeat("0123456789abcdef", 100<<10/16)
	return newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "max-age=300")
		switch r.URL.Path {
		case "/obj":
			h.Set("Content-Type", "text/plain")
			h.Set("ETag", `"v1"`)
			h.Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
			h.Set("Surrogate-Key", "a b")
			h.Add("X-Multi", "one")
			h.Add("X-Multi", "two")
			h.Set("Accept-Ranges", "bytes") // sorts before Age
			io.WriteString(w, small)
		case "/sniff":
			h["Content-Type"] = nil // the origin sends none: net/http sniffs one for a GET body
			io.WriteString(w, "<html><body>hi</body></html>")
		case "/nodate":
			h["Date"] = nil // net/http adds the current Date
			h.Set("Content-Type", "text/plain")
			io.WriteString(w, "no date")
		case "/vary":
			h.Set("Vary", "Accept-Encoding")
			h.Set("Content-Type", "text/plain")
			io.WriteString(w, "variant "+r.Header.Get("Accept-Encoding"))
		case "/big":
			h.Set("Content-Type", "application/octet-stream")
			io.WriteString(w, big)
		case "/missing":
			h.Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "not here")
		case "/stale":
			h.Set("Cache-Control", "max-age=0")
			h.Set("ETag", `"s"`)
			io.WriteString(w, "stale")
		default:
			h.Set("Cache-Control", "no-store")
			io.WriteString(w, "other")
		}
	})
}

// rawResponse reads one response's exact bytes: the head, then Content-Length body bytes
// (none for HEAD).
func rawResponse(br *bufio.Reader, head bool) (string, error) {
	var b strings.Builder
	n := int64(0)
	for {
		line, err := br.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			return b.String(), err
		}
		if name, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(name, "Content-Length") {
			n, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
		if line == "\r\n" {
			break
		}
	}
	if !head {
		if _, err := io.CopyN(&b, br, n); err != nil {
			return b.String(), err
		}
	}
	return b.String(), nil
}

// sendRaw opens a connection to addr with a 5 s deadline and writes req on it; the caller
// closes it.
func sendRaw(t *testing.T, addr, req string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// exchange sends raw request bytes on a new connection and returns the exact response bytes.
func exchange(t *testing.T, addr, req string) string {
	t.Helper()
	c := sendRaw(t, addr, req)
	defer c.Close()
	resp, err := rawResponse(bufio.NewReader(c), strings.HasPrefix(req, "HEAD "))
	if err != nil {
		t.Fatalf("read response to %q: %v (got %q)", req, err, resp)
	}
	return resp
}

// parsed reads one response with net/http's client parser.
func parsed(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

// warm stores path under the Host the tests use and waits until it is stored.
func warm(t *testing.T, e *Edge, path string, hdr ...string) {
	t.Helper()
	get(t, e.URL()+path, append([]string{"Host", "cache.test"}, hdr...)...)
	settle(t, e)
}

// TestFastHitMatchesSlowPath: for the same request on the same stored entry, the fast path
// writes exactly the bytes the net/http path writes (head fields, their order, Age, Date,
// sniffed Content-Type, Connection: close, body).
func TestFastHitMatchesSlowPath(t *testing.T) {
	o := fastOrigin(t)
	e := newEdge(t, o.URL, nil)
	slow := httptest.NewServer(e) // the same edge (and store) behind net/http only
	defer slow.Close()
	slowAddr := slow.Listener.Addr().String()
	for _, p := range []string{"/obj", "/sniff", "/nodate", "/big", "/missing"} {
		warm(t, e, p)
	}
	warm(t, e, "/vary", "Accept-Encoding", "gzip")
	warm(t, e, "/vary", "Accept-Encoding", "br")

	cases := []struct{ name, req string }{
		{"get", "GET /obj HTTP/1.1\r\nHost: cache.test\r\nUser-Agent: t\r\n\r\n"},
		{"head", "HEAD /obj HTTP/1.1\r\nHost: cache.test\r\n\r\n"},
		{"host case", "GET /obj HTTP/1.1\r\nHost: CACHE.test\r\n\r\n"},
		{"connection close", "GET /obj HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n"},
		{"connection keep-alive", "GET /obj HTTP/1.1\r\nHost: cache.test\r\nConnection: keep-alive\r\n\r\n"},
		{"sniffed type", "GET /sniff HTTP/1.1\r\nHost: cache.test\r\n\r\n"},
		{"sniffed type head", "HEAD /sniff HTTP/1.1\r\nHost: cache.test\r\n\r\n"},
		{"no date", "GET /nodate HTTP/1.1\r\nHost: cache.test\r\n\r\n"},
		{"vary gzip", "GET /vary HTTP/1.1\r\nHost: cache.test\r\nAccept-Encoding: gzip\r\n\r\n"},
		{"vary br", "GET /vary HTTP/1.1\r\nHost: cache.test\r\nAccept-Encoding: BR\r\n\r\n"},
		{"100 KB", "GET /big HTTP/1.1\r\nHost: cache.test\r\n\r\n"},
		{"404", "GET /missing HTTP/1.1\r\nHost: cache.test\r\n\r\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fast, ref string
			// Age and Date tick once a second: retry when the two requests straddled a tick.
			for try := 0; try < 3; try++ {
				before := e.stats.FastPath.Load()
				fast = exchange(t, e.Addr(), tc.req)
				if got := e.stats.FastPath.Load() - before; got != 1 {
					t.Fatalf("fast path answered %d requests, want 1: %q", got, fast)
				}
				ref = exchange(t, slowAddr, tc.req)
				if e.stats.FastPath.Load()-before != 1 {
					t.Fatal("the net/http server took the fast path")
				}
				if fast == ref {
					break
				}
			}
			if fast != ref {
				t.Fatalf("fast path response differs from net/http's:\nfast:\n%q\nnet/http:\n%q", fast, ref)
			}
			if !strings.Contains(fast, "\r\nX-Cache: HIT\r\n") || !strings.Contains(fast, "\r\nAge: ") ||
				!strings.Contains(fast, "\r\nVia: 1.1 switchyard-edge\r\n") {
				t.Fatalf("hit without X-Cache, Age or Via: %q", fast)
			}
		})
	}
}

// TestFastPathHandsOverOutOfScope: every request that is not a fresh memory hit gets the usual
// result. A miss, revalidation, range, precondition, request directive, stale entry, Vary
// mismatch or escaped target is answered on the fast connection itself (edge/fastmiss.go), never
// lent; an odd shape without a body (absolute form, two Hosts, no Host) is lent to net/http alone;
// in both cases the hit after it on the same connection is the fast path's again. After any other
// (a body, HTTP/1.0, Expect, a malformed head) the connection stays on net/http.
func TestFastPathHandsOverOutOfScope(t *testing.T) {
	o := fastOrigin(t)
	e := newEdge(t, o.URL, nil)
	for _, p := range []string{"/obj", "/stale"} {
		warm(t, e, p)
	}
	warm(t, e, "/vary", "Accept-Encoding", "gzip")
	const host = "Host: cache.test\r\n"
	cases := []struct {
		name, req, method string
		status            int
		xcache            string // "" = any
		who               string // own: the fast connection answers it; lent: net/http alone; "": handed over
	}{
		// The origin ignores validators, so a revalidation comes back as a MISS.
		{"range", "GET /obj HTTP/1.1\r\n" + host + "Range: bytes=0-9\r\n\r\n", "GET", 206, Hit, "own"},
		{"if-none-match", "GET /obj HTTP/1.1\r\n" + host + "If-None-Match: \"v1\"\r\n\r\n", "GET", 304, Hit, "own"},
		{"if-modified-since", "GET /obj HTTP/1.1\r\n" + host + "If-Modified-Since: Mon, 02 Jan 2006 15:04:05 GMT\r\n\r\n", "GET", 304, Hit, "own"},
		{"request cache-control", "GET /obj HTTP/1.1\r\n" + host + "Cache-Control: max-stale=10\r\n\r\n", "GET", 200, Hit, "own"},
		{"pragma", "GET /obj HTTP/1.1\r\n" + host + "Pragma: no-cache\r\n\r\n", "GET", 200, Miss, "own"},
		{"post", "POST /other HTTP/1.1\r\n" + host + "Content-Length: 2\r\n\r\nhi", "POST", 200, Bypass, ""},
		{"http/1.0", "GET /obj HTTP/1.0\r\n" + host + "\r\n", "GET", 200, Hit, ""},
		{"empty body", "GET /obj HTTP/1.1\r\n" + host + "Content-Length: 0\r\n\r\n", "GET", 200, Hit, "own"},
		{"absolute form", "GET http://cache.test/obj HTTP/1.1\r\n" + host + "\r\n", "GET", 200, "", "lent"},
		{"odd host", "GET /obj HTTP/1.1\r\nHost: cache!test\r\n\r\n", "GET", 200, "", "lent"},
		{"escaped path", "GET /o%62j HTTP/1.1\r\n" + host + "\r\n", "GET", 200, "", "own"},
		{"miss", "GET /nothing HTTP/1.1\r\n" + host + "\r\n", "GET", 200, Miss, "own"},
		{"stale entry", "GET /stale HTTP/1.1\r\n" + host + "\r\n", "GET", 200, Miss, "own"},
		{"vary mismatch", "GET /vary HTTP/1.1\r\n" + host + "Accept-Encoding: br\r\n\r\n", "GET", 200, Miss, "own"},
		{"rtt endpoint", "GET " + rttPath + " HTTP/1.1\r\n" + host + "\r\n", "GET", 200, "", "own"},
		{"expect", "GET /obj HTTP/1.1\r\n" + host + "Expect: 100-continue\r\n\r\n", "GET", 200, Hit, ""},
		{"leading empty line", "\r\nGET /obj HTTP/1.1\r\n" + host + "\r\n", "GET", 400, "", ""},
		{"two hosts", "GET /obj HTTP/1.1\r\n" + host + host + "\r\n", "GET", 400, "", "lent"},
		{"no host", "GET /obj HTTP/1.1\r\n\r\n", "GET", 400, "", "lent"},
		// Refused by internal/h1's guard in front of net/http, as the L7 proxy refuses it.
		{"smuggling shape", "GET /obj HTTP/1.1\r\n" + host + "Content-Length: 0\r\nContent-Length: 0\r\n\r\n", "GET", 400, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, hits, lent, own := e.stats.FastPath.Load(), e.stats.Hits.Load(), e.stats.Lent.Load(), e.stats.FastMiss.Load()
			c, err := net.Dial("tcp", e.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			// A hit follows on the same connection: it must stay on net/http too.
			io.WriteString(c, tc.req)
			br := bufio.NewReader(c)
			resp, _ := parsed(t, br, tc.method)
			if resp.StatusCode != tc.status || (tc.xcache != "" && resp.Header.Get("X-Cache") != tc.xcache) {
				t.Fatalf("got %d X-Cache %q, want %d %q", resp.StatusCode, resp.Header.Get("X-Cache"), tc.status, tc.xcache)
			}
			if resp.StatusCode < 400 && !resp.Close {
				io.WriteString(c, "GET /obj HTTP/1.1\r\n"+host+"\r\n")
				next, body := parsed(t, br, "GET")
				if next.Header.Get("X-Cache") != Hit || len(body) != 480 {
					t.Fatalf("next request on the handed-over connection: %d %q %d bytes", next.StatusCode, next.Header.Get("X-Cache"), len(body))
				}
			}
			wantFast, wantLent, wantOwn := int64(0), int64(0), int64(0)
			switch tc.who {
			case "lent":
				wantLent = 1
			case "own":
				wantOwn = 1
			}
			if tc.who != "" && tc.status < 400 {
				wantFast = 1 // the hit that followed; net/http closes after a 400
			}
			if got := e.stats.FastPath.Load() - before; got != wantFast {
				t.Fatalf("fast path answered %d requests, want %d", got, wantFast)
			}
			if got := e.stats.Lent.Load() - lent; got != wantLent {
				t.Fatalf("%d requests lent to net/http, want %d", got, wantLent)
			}
			if got := e.stats.FastMiss.Load() - own; got != wantOwn {
				t.Fatalf("%d requests answered on the fast connection through the cache path, want %d", got, wantOwn)
			}
			if tc.xcache == Hit && e.stats.Hits.Load() == hits {
				t.Fatal("hit not counted")
			}
		})
	}
}

// TestFastPathPipelining: requests sent in one write are answered in order, on the fast path
// but for one that net/http answers alone; the fast path goes on with the bytes it had read.
func TestFastPathPipelining(t *testing.T) {
	o := fastOrigin(t)
	e := newEdge(t, o.URL, nil)
	warm(t, e, "/obj")
	warm(t, e, "/big")
	c, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	const host = "Host: cache.test\r\n"
	reqs := []struct{ method, req string }{
		{"GET", "GET /obj HTTP/1.1\r\n" + host + "\r\n"},
		{"HEAD", "HEAD /obj HTTP/1.1\r\n" + host + "\r\n"},
		{"GET", "GET /big HTTP/1.1\r\n" + host + "\r\n"},
		{"GET", "GET /obj HTTP/1.1\r\n" + host + "\r\n"},
		{"GET", "GET /obj HTTP/1.1\r\n" + host + "Range: bytes=0-3\r\n\r\n"},
		{"GET", "GET /big HTTP/1.1\r\n" + host + "\r\n"},
	}
	var all strings.Builder
	for _, r := range reqs {
		all.WriteString(r.req)
	}
	before := e.stats.FastPath.Load()
	hits := e.stats.Hits.Load()
	if _, err := io.WriteString(c, all.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	wantLen := []int{480, 0, 100 << 10, 480, 4, 100 << 10}
	wantStatus := []int{200, 200, 200, 200, 206, 200}
	for i, r := range reqs {
		resp, body := parsed(t, br, r.method)
		if resp.StatusCode != wantStatus[i] || len(body) != wantLen[i] || resp.Header.Get("X-Cache") != Hit {
			t.Fatalf("response %d: %d %q %d bytes, want %d %d bytes", i, resp.StatusCode, resp.Header.Get("X-Cache"), len(body), wantStatus[i], wantLen[i])
		}
	}
	if got := e.stats.FastPath.Load() - before; got != 5 {
		t.Fatalf("fast path answered %d, want all 5 but the range request", got)
	}
	if got := e.stats.Hits.Load() - hits; got != 6 {
		t.Fatalf("hits counted %d, want 6", got)
	}
}

// TestFastPathConnectionClose: "Connection: close" is answered with Connection: close and the
// connection is closed after the response, even with more requests already sent.
func TestFastPathConnectionClose(t *testing.T) {
	o := fastOrigin(t)
	e := newEdge(t, o.URL, nil)
	warm(t, e, "/obj")
	c, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	before := e.stats.FastPath.Load()
	io.WriteString(c, "GET /obj HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\nGET /obj HTTP/1.1\r\nHost: cache.test\r\n\r\n")
	br := bufio.NewReader(c)
	resp, body := parsed(t, br, "GET")
	if !resp.Close || resp.Header.Get("X-Cache") != Hit || len(body) != 480 {
		t.Fatalf("got close=%v %q %d bytes", resp.Close, resp.Header.Get("X-Cache"), len(body))
	}
	if n, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("connection still open after Connection: close (read %q, %v)", n, err)
	}
	if got := e.stats.FastPath.Load() - before; got != 1 {
		t.Fatalf("fast path answered %d, want 1", got)
	}
}

// TestFastPathCloseEndsIdleConnections: Close does not wait for idle keep-alive connections.
func TestFastPathCloseEndsIdleConnections(t *testing.T) {
	o := fastOrigin(t)
	e := newEdge(t, o.URL, nil)
	warm(t, e, "/obj")
	c, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /obj HTTP/1.1\r\nHost: cache.test\r\n\r\n")
	br := bufio.NewReader(c)
	parsed(t, br, "GET")
	start := time.Now()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v with one idle connection", d)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("idle fast-path connection still open after Close")
	}
	if _, err := net.DialTimeout("tcp", e.Addr(), time.Second); err == nil {
		t.Fatal("listener still accepting after Close")
	}
}

// TestFastPathDisabled: with disable_fast_path every hit goes through net/http.
func TestFastPathDisabled(t *testing.T) {
	o := fastOrigin(t)
	e := newEdge(t, o.URL, func(c *Config) { c.DisableFastPath = true })
	warm(t, e, "/obj")
	r := get(t, e.URL()+"/obj", "Host", "cache.test")
	expect(t, r, 200, Hit, strings.Repeat("s", 480))
	if n := e.stats.FastPath.Load(); n != 0 {
		t.Fatalf("fast path answered %d with it disabled", n)
	}
	if e.Stats().Snapshot()["fast_path_hits"] != 0 {
		t.Fatal("snapshot reports fast-path hits")
	}
}

// TestFastPathAfterUpdate: a soft purge stores a new entry; the fast path must not answer from
// the old one's pre-rendered head (the entry is stale now and goes to net/http).
func TestFastPathAfterUpdate(t *testing.T) {
	o := fastOrigin(t)
	e := newEdge(t, o.URL, nil)
	warm(t, e, "/obj")
	exchange(t, e.Addr(), "GET /obj HTTP/1.1\r\nHost: cache.test\r\n\r\n") // renders the head
	if _, err := e.Purge(PurgeRequest{URLs: []string{"http://cache.test/obj"}, Soft: true}); err != nil {
		t.Fatal(err)
	}
	before := e.stats.FastPath.Load()
	resp := exchange(t, e.Addr(), "GET /obj HTTP/1.1\r\nHost: cache.test\r\n\r\n")
	if strings.Contains(resp, "X-Cache: HIT") || e.stats.FastPath.Load() != before {
		t.Fatalf("soft-purged entry answered as a fast hit: %q", resp)
	}
}

// BenchmarkFastHit measures the fast path's cost per hit on a keep-alive connection.
func BenchmarkFastHit(b *testing.B) {
	e, c := benchHitEdge(b)
	br := bufio.NewReader(c)
	req := []byte(fmt.Sprintf("GET /x HTTP/1.1\r\nHost: %s\r\n\r\n", e.Addr()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c.Write(req)
		resp, err := rawResponse(br, false)
		if err != nil || !bytes.Contains([]byte(resp), []byte("X-Cache: HIT")) {
			b.Fatal(resp, err)
		}
	}
}

// benchHitEdge is an edge holding a fresh 480-byte /x, and a client connection to it.
func benchHitEdge(b *testing.B) (*Edge, net.Conn) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, strings.Repeat("s", 480))
	}))
	b.Cleanup(o.Close)
	e, err := New(Config{Listen: "127.0.0.1:0", Origin: o.URL}, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	http.Get(e.URL() + "/x")
	c, err := net.Dial("tcp", e.Addr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return e, c
}

// TestFastPathConcurrentHitsAndPurges: clients hit the fast path while the entry is purged (soft
// and hard) and refetched; every response is complete and correct. Each client reconnects every
// 20 requests, because a connection handed over to net/http (after a miss) stays there. Run with
// -race.
func TestFastPathConcurrentHitsAndPurges(t *testing.T) {
	o := fastOrigin(t)
	e := newEdge(t, o.URL, nil)
	warm(t, e, "/obj")
	want := strings.Repeat("s", 480)
	errs := make(chan error, 8)
	client := func() error {
		for conn := 0; conn < 10; conn++ {
			c, err := net.Dial("tcp", e.Addr())
			if err != nil {
				return err
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			for i := 0; i < 20; i++ {
				io.WriteString(c, "GET /obj HTTP/1.1\r\nHost: cache.test\r\n\r\n")
				resp, err := http.ReadResponse(br, &http.Request{Method: "GET"})
				if err != nil {
					c.Close()
					return err
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || string(body) != want {
					c.Close()
					return fmt.Errorf("request %d: %d %q %d bytes, %v", i, resp.StatusCode, resp.Header.Get("X-Cache"), len(body), err)
				}
			}
			c.Close()
		}
		return nil
	}
	for w := 0; w < 8; w++ {
		go func() { errs <- client() }()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 20; i++ {
			e.Purge(PurgeRequest{URLs: []string{"http://cache.test/obj"}, Soft: i%2 == 0})
			time.Sleep(3 * time.Millisecond)
		}
	}()
	for w := 0; w < 8; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	<-done
	if e.stats.FastPath.Load() == 0 {
		t.Fatal("no request took the fast path")
	}
}
