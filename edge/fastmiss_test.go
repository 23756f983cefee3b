package edge

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// missOrigin serves the shapes of response a miss can bring: a length, a stream without one, a
// large body, an error status, an uncacheable answer, an early hint, a 304 for validators, and a
// response gated on a channel (slow or cut at will).
func missOrigin(t *testing.T, gate <-chan struct{}) *testOrigin {
	big := strings.Repeat("0123456789abcdef", 100<<10/16)
	return newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "max-age=300")
		h.Set("Content-Type", "text/plain")
		h.Set("ETag", `"e1"`)
		switch {
		case strings.HasPrefix(r.URL.Path, "/len/"):
			io.WriteString(w, strings.Repeat("l", 480))
		case strings.HasPrefix(r.URL.Path, "/stream/"):
			io.WriteString(w, "part one ")
			w.(http.Flusher).Flush()
			// The pause makes the edge stream part one (and flush it) before part two comes, on
			// both servers compared: without it, a fill that is complete by the handler's first
			// write is sent with a Content-Length (net/http's rule for a handler that ends
			// unflushed within 2 KB), and which of the two happens was down to scheduling.
			time.Sleep(100 * time.Millisecond)
			io.WriteString(w, "part two")
		case strings.HasPrefix(r.URL.Path, "/sniff/"):
			h["Content-Type"] = nil // no type: the edge sniffs one, as net/http does
			io.WriteString(w, "<html>tiny</html>")
		case strings.HasPrefix(r.URL.Path, "/big/"):
			io.WriteString(w, big)
		case strings.HasPrefix(r.URL.Path, "/gone/"):
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "not here")
		case strings.HasPrefix(r.URL.Path, "/nostore/"):
			h.Set("Cache-Control", "no-store")
			io.WriteString(w, "uncacheable")
		case strings.HasPrefix(r.URL.Path, "/hints/"):
			h.Set("Link", "</s.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			h.Del("Link")
			io.WriteString(w, "hinted")
		case strings.HasPrefix(r.URL.Path, "/gated/"):
			io.WriteString(w, "first ")
			w.(http.Flusher).Flush()
			<-gate
			io.WriteString(w, "second")
		default:
			io.WriteString(w, "default "+r.URL.Path)
		}
	})
}

// clRE finds the final response's Content-Length.
var clRE = regexp.MustCompile(`\r\nContent-Length: (\d+)\r\n`)

// dateRE matches the Date field, which ticks between the two servers' answers.
var dateRE = regexp.MustCompile(`\r\nDate: [^\r]*\r\n`)

// rawMiss sends req on a new connection and returns the response head as sent (Date blanked)
// and the body as delivered (chunked framing decoded).
func rawMiss(t *testing.T, addr, req string) (head, body string) {
	t.Helper()
	c := sendRaw(t, addr, req)
	defer c.Close()
	br := bufio.NewReader(c)
	var hb strings.Builder
	status := ""
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read head of %q: %v (got %q)", req, err, hb.String())
		}
		hb.WriteString(line)
		if status == "" {
			status = line
		}
		if line == "\r\n" && !strings.HasPrefix(status, "HTTP/1.1 1") {
			break
		}
		if line == "\r\n" {
			hb.WriteString("|") // an interim response ended; the final one follows
			status = ""
		}
	}
	head = dateRE.ReplaceAllString(hb.String(), "\r\nDate: X\r\n")
	var rd io.Reader = br // no framing: the body runs to the end of the connection
	if m := clRE.FindStringSubmatch(head); m != nil {
		n, _ := strconv.Atoi(m[1])
		rd = io.LimitReader(br, int64(n))
	}
	if strings.Contains(head, "\r\nTransfer-Encoding: chunked\r\n") {
		rd = httputil.NewChunkedReader(br)
	}
	if strings.HasPrefix(req, "HEAD ") || strings.HasPrefix(status, "HTTP/1.1 304 ") {
		rd = strings.NewReader("")
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("read body of %q: %v", req, err)
	}
	return head, string(b)
}

// TestFastMissMatchesNetHTTP: for every shape of miss (a length, a stream, a small stream that
// net/http gives a sniffed type, 100 KB, a 404, an uncacheable pass, a HEAD, an
// early hint, a 502) and for a conditional and a range request on a stored entry, the fast
// connection's answer has exactly the head net/http writes (fields, their order, framing,
// Connection) and the same body.
func TestFastMissMatchesNetHTTP(t *testing.T) {
	o := missOrigin(t, nil)
	e := newEdge(t, o.URL, nil)
	slow := httptest.NewServer(e) // the same edge and store behind net/http only
	defer slow.Close()
	dead := newEdge(t, "http://127.0.0.1:1", nil) // nothing listens: every miss is a 502
	deadSlow := httptest.NewServer(dead)
	defer deadSlow.Close()
	warm(t, e, "/len/stored")
	cases := []struct{ name, req string }{
		{"length", "GET /len/%d HTTP/1.1\r\nHost: cache.test\r\n"},
		{"stream", "GET /stream/%d HTTP/1.1\r\nHost: cache.test\r\n"},
		{"sniffed type", "GET /sniff/%d HTTP/1.1\r\nHost: cache.test\r\n"},
		{"100 KB", "GET /big/%d HTTP/1.1\r\nHost: cache.test\r\n"},
		{"404", "GET /gone/%d HTTP/1.1\r\nHost: cache.test\r\n"},
		{"pass", "GET /nostore/%d HTTP/1.1\r\nHost: cache.test\r\n"},
		{"head", "HEAD /len/%d HTTP/1.1\r\nHost: cache.test\r\n"},
		{"early hints", "GET /hints/%d HTTP/1.1\r\nHost: cache.test\r\n"},
		{"conditional", "GET /len/stored?%d HTTP/1.1\r\nHost: cache.test\r\nIf-None-Match: \"e1\"\r\n"},
		{"range", "GET /len/stored?%d HTTP/1.1\r\nHost: cache.test\r\nRange: bytes=2-9\r\n"},
		{"query", "GET /len/x?a=%d&b=/c HTTP/1.1\r\nHost: cache.test\r\nUser-Agent: t\r\n"},
	}
	n := 0
	for _, tc := range cases {
		for _, conn := range []string{"Connection: close\r\n", "Connection: keep-alive\r\n"} {
			t.Run(tc.name+" "+strings.TrimSpace(conn), func(t *testing.T) {
				n++
				own := e.stats.FastMiss.Load()
				fh, fb := rawMiss(t, e.Addr(), fmt.Sprintf(tc.req, n)+conn+"\r\n")
				if e.stats.FastMiss.Load() == own {
					t.Fatalf("not answered on the fast connection: %q", fh)
				}
				n++
				sh, sb := rawMiss(t, slow.Listener.Addr().String(), fmt.Sprintf(tc.req, n)+conn+"\r\n")
				if fh != sh || fb != sb {
					t.Fatalf("fast connection's answer differs from net/http's:\nfast: %q\n%q\nnet/http: %q\n%q", fh, fb, sh, sb)
				}
			})
		}
	}
	fh, fb := rawMiss(t, dead.Addr(), "GET /x HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n")
	sh, sb := rawMiss(t, deadSlow.Listener.Addr().String(), "GET /x HTTP/1.1\r\nHost: cache.test\r\nConnection: close\r\n\r\n")
	if fh != sh || fb != sb || !strings.HasPrefix(fh, "HTTP/1.1 502 ") {
		t.Fatalf("502: fast %q %q, net/http %q %q", fh, fb, sh, sb)
	}
}

// plainGet fetches url with Host cache.test, for goroutines (no t.Fatal).
func plainGet(url string) (result, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return result{}, err
	}
	req.Host = "cache.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return result{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return result{resp.StatusCode, string(b), resp.Header}, err
}

// TestFastMissPipelinedOrder: requests pipelined behind misses (a slow one, a stream, a HEAD, a
// pass) are answered in the order sent, on one connection, and none is lent to net/http.
func TestFastMissPipelinedOrder(t *testing.T) {
	gate := make(chan struct{})
	o := missOrigin(t, gate)
	e := newEdge(t, o.URL, nil)
	warm(t, e, "/len/hot")
	c, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	reqs := []struct{ method, path, body string }{
		{"GET", "/len/hot", strings.Repeat("l", 480)},
		{"GET", "/gated/a", "first second"},
		{"GET", "/len/hot", strings.Repeat("l", 480)},
		{"GET", "/stream/b", "part one part two"},
		{"HEAD", "/len/c", ""},
		{"GET", "/nostore/d", "uncacheable"},
		{"GET", "/len/hot", strings.Repeat("l", 480)},
	}
	var all strings.Builder
	for _, r := range reqs {
		all.WriteString(r.method + " " + r.path + " HTTP/1.1\r\nHost: cache.test\r\n\r\n")
	}
	lent, fast := e.stats.Lent.Load(), e.stats.FastPath.Load()
	if _, err := io.WriteString(c, all.String()); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i, r := range reqs {
		if i == 1 {
			close(gate) // the first answer is out; the gated miss may complete now
		}
		resp, body := parsed(t, br, r.method)
		if resp.StatusCode != 200 || body != r.body {
			t.Fatalf("response %d (%s %s): %d %q, want %q", i, r.method, r.path, resp.StatusCode, body, r.body)
		}
	}
	if got := e.stats.Lent.Load() - lent; got != 0 {
		t.Fatalf("%d requests lent to net/http, want none", got)
	}
	if got := e.stats.FastPath.Load() - fast; got != 3 {
		t.Fatalf("%d fast-path hits, want the 3 hits", got)
	}
}

// TestFastMissClientLeavesMidFill: the client whose miss started a fill disconnects while the
// body is arriving; the request collapsed on the same fill still gets the whole body, the
// object is stored, and the origin was asked once.
func TestFastMissClientLeavesMidFill(t *testing.T) {
	gate := make(chan struct{})
	o := missOrigin(t, gate)
	e := newEdge(t, o.URL, nil)
	leader, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	leader.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(leader, "GET /gated/x HTTP/1.1\r\nHost: cache.test\r\n\r\n")
	br := bufio.NewReader(leader)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	part := make([]byte, len("first "))
	if _, err := io.ReadFull(resp.Body, part); err != nil || string(part) != "first " {
		t.Fatalf("leader read %q, %v", part, err)
	}
	collapsed := e.stats.Collapsed.Load()
	var wg sync.WaitGroup
	var got result
	var gotErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, gotErr = plainGet(e.URL() + "/gated/x")
	}()
	testutil.Eventually(t, 5*time.Second, func() bool { return e.stats.Collapsed.Load() > collapsed },
		"the second request never joined the fill")
	leader.Close() // the leader leaves mid-body
	time.Sleep(20 * time.Millisecond)
	close(gate)
	wg.Wait()
	if gotErr != nil {
		t.Fatal(gotErr)
	}
	if got.status != 200 || got.body != "first second" || got.cache() != Miss {
		t.Fatalf("collapsed request: %d %q %q", got.status, got.body, got.cache())
	}
	settle(t, e)
	expect(t, get(t, e.URL()+"/gated/x", "Host", "cache.test"), 200, Hit, "first second")
	if n := o.hits("/gated/x"); n != 1 {
		t.Fatalf("origin asked %d times, want once", n)
	}
}

// TestFastMissSlowOriginDoesNotBlockHits: while one connection waits on a miss whose origin
// does not answer, hits on other connections are served at once.
func TestFastMissSlowOriginDoesNotBlockHits(t *testing.T) {
	gate := make(chan struct{})
	o := missOrigin(t, gate)
	e := newEdge(t, o.URL, nil)
	warm(t, e, "/len/hot")
	slowc, err := net.Dial("tcp", e.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer slowc.Close()
	slowc.SetDeadline(time.Now().Add(20 * time.Second))
	io.WriteString(slowc, "GET /gated/slow HTTP/1.1\r\nHost: cache.test\r\n\r\n")
	testutil.Eventually(t, 5*time.Second, func() bool { return o.hits("/gated/slow") == 1 },
		"the miss never reached the origin")
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 50; i++ {
			r, err := plainGet(e.URL() + "/len/hot")
			if err != nil || r.cache() != Hit {
				done <- fmt.Errorf("hit %d: %d %q %v", i, r.status, r.cache(), err)
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("hits on other connections waited on the slow miss")
	}
	close(gate)
	resp, body := parsed(t, bufio.NewReader(slowc), "GET")
	if resp.StatusCode != 200 || body != "first second" {
		t.Fatalf("slow miss: %d %q", resp.StatusCode, body)
	}
}
