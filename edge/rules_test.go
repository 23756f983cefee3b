package edge

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// testClock is the wall clock plus an offset the test moves forward: an edge built with its now
// (WithClock) sees stored entries age without the test sleeping. The origins of the tests that
// use it send no Date header, so the offset does not make a fresh response look old too
// (apparent age, RFC 9111 4.2.3).
type testClock struct{ offset atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// newClockedEdge is newEdge with the cache's clock set to c.
func newClockedEdge(t *testing.T, origin string, c *testClock, mutate func(*Config)) *Edge {
	t.Helper()
	cfg := Config{Listen: "127.0.0.1:0", Origin: origin, Tiers: TierConfig{Token: testTierToken}}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := New(cfg, WithLogger(slog.New(slog.DiscardHandler)), WithClock(c.now))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestAgeParsing: an Age of 2^31 or more is capped at 2147483648 (RFC 9111 1.2.2), not dropped,
// and a list-based Age uses its first member (RFC 9111 5.1); either makes the response stale.
func TestAgeParsing(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		switch r.URL.Path {
		case "/huge":
			w.Header().Set("Age", "2147483649")
		case "/max":
			w.Header().Set("Age", "2147483648")
		case "/list":
			w.Header().Set("Age", "7200, 0")
		case "/lines":
			w.Header().Add("Age", "7200")
			w.Header().Add("Age", "0")
		}
		fmt.Fprint(w, r.URL.Path)
	})
	e := newEdge(t, o.URL, nil)
	for _, p := range []string{"/huge", "/max", "/list", "/lines"} {
		r := get(t, e.URL()+p)
		expect(t, r, 200, Miss, p)
		if p == "/huge" || p == "/max" {
			if got := r.h.Get("Age"); got != "2147483648" {
				t.Errorf("%s: Age %q, want 2147483648", p, got)
			}
		}
		settle(t, e)
		if r := get(t, e.URL()+p); r.cache() == Hit {
			t.Errorf("%s: second request was a HIT (Age %s); the Age makes it stale", p, r.h.Get("Age"))
		}
		if n := o.hits(p); n != 2 {
			t.Errorf("%s: origin saw %d requests, want 2", p, n)
		}
	}
}

// TestInvalidExpiresIsExpired: an Expires that is not a strict HTTP-date (a one-digit hour, runs
// of spaces) or that appears twice means already expired (RFC 9111 5.3).
func TestInvalidExpiresIsExpired(t *testing.T) {
	t.Parallel()
	later := time.Now().UTC().Add(2 * time.Hour)
	// A one-digit hour (03:04:05) written out, not with Go's 12-hour "3" layout; a year on.
	oneDigit := time.Date(later.Year()+1, later.Month(), 1, 0, 0, 0, 0, time.UTC).Format("Mon, 02 Jan 2006") + " 3:04:05 GMT"
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
		h.Set("Last-Modified", time.Now().UTC().Add(-240*time.Hour).Format(http.TimeFormat)) // heuristic must not apply
		switch r.URL.Path {
		case "/valid":
			h.Set("Expires", later.Format(http.TimeFormat))
		case "/one-digit-hour":
			h.Set("Expires", oneDigit)
		case "/spaces":
			h.Set("Expires", later.Format("Mon,  02 Jan 2006  15:04:05 GMT"))
		case "/two-lines":
			h.Add("Expires", later.Format(http.TimeFormat))
			h.Add("Expires", later.Format(http.TimeFormat))
		}
		fmt.Fprint(w, r.URL.Path)
	})
	e := newEdge(t, o.URL, nil)
	for _, c := range []struct {
		path, second string
	}{{"/valid", Hit}, {"/one-digit-hour", Miss}, {"/spaces", Miss}, {"/two-lines", Miss}} {
		t.Run(c.path, func(t *testing.T) {
			expect(t, get(t, e.URL()+c.path), 200, Miss, c.path)
			settle(t, e)
			if r := get(t, e.URL()+c.path); r.cache() != c.second {
				t.Errorf("%s: second request %s, want %s", c.path, r.cache(), c.second)
			}
		})
	}
}

// TestRejectedOriginResponsesLeakNothing: responses Go's client refuses (an unknown
// Transfer-Encoding, a broken status line, a bad Content-Length, a connection closed or reset
// before an answer) become a 502 whose body is a fixed text, on GET and on a passed-through POST.
func TestRejectedOriginResponsesLeakNothing(t *testing.T) {
	t.Parallel()
	answers := map[string]string{
		"/te":     "HTTP/1.1 200 OK\r\nTransfer-Encoding: bogus\r\nCache-Control: max-age=60\r\n\r\nhello",
		"/status": "HTTP/1.1 2xx Broken\r\n\r\n",
		"/cl":     "HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello",
		"/neg":    "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
	}
	o := newRawOrigin(t, func(r *http.Request, c net.Conn) bool {
		switch r.URL.Path {
		case "/close":
			c.Close()
		case "/reset":
			reset(c)
		default:
			c.Write([]byte(answers[r.URL.Path]))
		}
		return false
	})
	e := newEdge(t, o.URL(), nil)
	for _, p := range []string{"/te", "/status", "/cl", "/neg", "/close", "/reset"} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			if p == "/te" {
				continue // read by the edge after all: TestUnknownTransferCodings
			}
			r := do(t, method, e.URL()+p)
			if r.status != http.StatusBadGateway || internalLeak(r.body) || strings.TrimSpace(r.body) != msgBadGateway {
				t.Errorf("%s %s: %d %q; want 502 with the fixed text", method, p, r.status, r.body)
			}
		}
	}
	r := get(t, e.URL()+"/.well-known/switchyard-edge/rtt") // the RTT endpoint measures the origin
	if r.status != http.StatusBadGateway || internalLeak(r.body) {
		t.Errorf("rtt endpoint: %d %q", r.status, r.body)
	}
}

// TestStaleOnOriginConnectionFailure: when the origin closes or resets the connection, a stored
// response that may be served stale (stale-if-error, or the grace setting) is served, not a 502.
func TestStaleOnOriginConnectionFailure(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		cc    string
		grace time.Duration
		fail  func(net.Conn)
	}{
		{"close/stale-if-error", "max-age=1, stale-if-error=600", 0, func(c net.Conn) { c.Close() }},
		{"reset/stale-if-error", "max-age=1, stale-if-error=600", 0, reset},
		{"close/grace", "max-age=1", time.Hour, func(c net.Conn) { c.Close() }},
		{"reset/grace", "max-age=1", time.Hour, reset},
		{"close/unreachable-default", "max-age=1", 0, func(c net.Conn) { c.Close() }},
		{"reset/unreachable-default", "max-age=1", 0, reset},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var failing atomic.Bool
			o := newRawOrigin(t, func(r *http.Request, conn net.Conn) bool {
				if failing.Load() {
					c.fail(conn)
					return false
				}
				fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nCache-Control: %s\r\nContent-Length: 2\r\n\r\nv1", c.cc)
				return true
			})
			var clock testClock
			e := newClockedEdge(t, o.URL(), &clock, func(cfg *Config) { cfg.Grace = Duration(c.grace) })
			expect(t, get(t, e.URL()+"/x"), 200, Miss, "v1")
			failing.Store(true)
			clock.advance(1100 * time.Millisecond) // max-age=1 passes: the entry is stale by its own clock
			r := get(t, e.URL()+"/x")
			expect(t, r, 200, Stale, "v1")
			// With grace the revalidation runs in the background: wait for it.
			testutil.Eventually(t, 5*time.Second, func() bool { return o.requests.Load() >= 2 }, "the stale entry's revalidation never reached the origin")
		})
	}
}

// TestStaleOnFailureMidBody: an origin that sends the head of a stored entry's replacement and
// then resets or closes the connection mid-body gets the stale copy served (stale-if-error),
// as a failure before the head does, not a truncated response; a body that comes whole is
// served as usual, and one of unknown length is streamed (and cut) as it comes.
func TestStaleOnFailureMidBody(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		fail func(net.Conn)
	}{{"reset", reset}, {"close", func(c net.Conn) { c.Close() }}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var mode atomic.Int32 // 0: v1; 1: a replacement cut after 100 of 1000 bytes; 2: v2 whole
			o := newRawOrigin(t, func(r *http.Request, conn net.Conn) bool {
				const cc = "Cache-Control: max-age=1, stale-if-error=600\r\n"
				switch mode.Load() {
				case 0:
					fmt.Fprint(conn, "HTTP/1.1 200 OK\r\n"+cc+"Content-Length: 2\r\n\r\nv1")
				case 1:
					fmt.Fprint(conn, "HTTP/1.1 200 OK\r\n"+cc+"Content-Length: 1000\r\n\r\n"+strings.Repeat("x", 100))
					time.Sleep(50 * time.Millisecond) // the head and the first bytes reach the edge first
					c.fail(conn)
					return false
				default:
					fmt.Fprint(conn, "HTTP/1.1 200 OK\r\n"+cc+"Content-Length: 2\r\n\r\nv2")
				}
				return true
			})
			var clock testClock
			e := newClockedEdge(t, o.URL(), &clock, nil)
			expect(t, get(t, e.URL()+"/x"), 200, Miss, "v1")
			settle(t, e)
			mode.Store(1)
			clock.advance(1100 * time.Millisecond) // stale by its own clock
			expect(t, get(t, e.URL()+"/x"), 200, Stale, "v1")
			if n := e.stats.StaleMidBody.Load(); n != 1 {
				t.Fatalf("stale_mid_body %d, want 1", n)
			}
			mode.Store(2)
			expect(t, get(t, e.URL()+"/x"), 200, Miss, "v2")
		})
	}
}

// TestEarlyHintsForwardedNeverCached: a 103 from the origin reaches the client that caused the
// fetch (GET miss and passed-through POST) before the final response; the final response does not
// inherit its fields, and a hit carries neither the 103 nor its fields.
func TestEarlyHintsForwardedNeverCached(t *testing.T) {
	t.Parallel()
	o := newRawOrigin(t, func(r *http.Request, c net.Conn) bool {
		io.Copy(io.Discard, r.Body)
		fmt.Fprint(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+
			"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 2\r\n\r\nok")
		return true
	})
	e := newEdge(t, o.URL(), nil)
	send := func(method string) (hints []string, r result) {
		t.Helper()
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			hints = append(hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, e.URL()+"/page", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return hints, result{resp.StatusCode, string(b), resp.Header}
	}
	want := "103 </style.css>; rel=preload"
	hints, r := send(http.MethodGet)
	expect(t, r, 200, Miss, "ok")
	if len(hints) != 1 || hints[0] != want || r.h.Get("Link") != "" {
		t.Fatalf("miss: interim %q, final Link %q; want [%q] and none", hints, r.h.Get("Link"), want)
	}
	settle(t, e)
	hints, r = send(http.MethodGet)
	expect(t, r, 200, Hit, "ok")
	if len(hints) != 0 || r.h.Get("Link") != "" {
		t.Fatalf("hit: interim %q, Link %q; a stored response has no 103", hints, r.h.Get("Link"))
	}
	hints, r = send(http.MethodPost)
	if r.status != 200 || len(hints) != 1 || hints[0] != want {
		t.Fatalf("POST: %d, interim %q; want the 103 passed on", r.status, hints)
	}
}

// TestUnreachableStaleLimits: serving stale while the origin is unreachable is still forbidden
// by must-revalidate, proxy-revalidate, s-maxage and no-cache, and stale_if_unreachable: 0s turns
// it off; none of them gets the stored body.
func TestUnreachableStaleLimits(t *testing.T) {
	t.Parallel()
	var failing atomic.Bool
	o := newRawOrigin(t, func(r *http.Request, conn net.Conn) bool {
		if failing.Load() {
			conn.Close()
			return false
		}
		cc := map[string]string{"/mr": "max-age=1, must-revalidate", "/pr": "max-age=1, proxy-revalidate",
			"/sm": "s-maxage=1", "/nc": "max-age=1, no-cache", "/plain": "max-age=1"}[r.URL.Path]
		fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nCache-Control: %s\r\nEtag: \"e\"\r\nContent-Length: 6\r\n\r\nstored", cc)
		return true
	})
	off := Duration(0)
	var clock testClock
	e := newClockedEdge(t, o.URL(), &clock, nil)
	eOff := newClockedEdge(t, o.URL(), &clock, func(c *Config) { c.StaleIfUnreachable = &off })
	for _, p := range []string{"/mr", "/pr", "/sm", "/nc"} {
		expect(t, get(t, e.URL()+p), 200, Miss, "stored")
	}
	expect(t, get(t, eOff.URL()+"/plain"), 200, Miss, "stored")
	settle(t, e)
	settle(t, eOff)
	failing.Store(true)
	clock.advance(1100 * time.Millisecond) // max-age=1 passes
	for _, p := range []string{"/mr", "/pr", "/sm", "/nc"} {
		if r := get(t, e.URL()+p); r.status == 200 || r.body == "stored" {
			t.Errorf("%s: %d %s %q while the origin is unreachable; stale use is forbidden", p, r.status, r.cache(), r.body)
		}
	}
	if r := get(t, eOff.URL()+"/plain"); r.status != http.StatusBadGateway {
		t.Errorf("stale_if_unreachable 0s: %d %s, want 502", r.status, r.cache())
	}
}

// TestUnknownTransferCodings: a response Go's client refuses for its Transfer-Encoding alone is
// fetched leniently: an unknown coding read until the origin closes, gzip decoded, chunked
// unframed; the codings never reach the client or the store, and the response is cached.
func TestUnknownTransferCodings(t *testing.T) {
	t.Parallel()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("gzipped body"))
	zw.Close()
	o := newRawOrigin(t, func(r *http.Request, c net.Conn) bool {
		switch r.URL.Path {
		case "/unknown":
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: x-bogus\r\nCache-Control: max-age=60\r\n\r\nuntil close")
		case "/gzip-chunked": // the connection stays open: the next response must be read right
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nCache-Control: max-age=60\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", gz.Len(), gz.Bytes())
			return true
		case "/plain":
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\r\nplain")
			return true
		}
		return false
	})
	e := newEdge(t, o.URL(), nil)
	for _, c := range []struct{ path, body string }{{"/unknown", "until close"}, {"/gzip-chunked", "gzipped body"}, {"/plain", "plain"}} {
		t.Run(c.path, func(t *testing.T) {
			path, body := c.path, c.body
			r := get(t, e.URL()+path)
			expect(t, r, 200, Miss, body)
			if r.h.Get("Transfer-Encoding") != "" {
				t.Errorf("%s: Transfer-Encoding %q reached the client", path, r.h.Get("Transfer-Encoding"))
			}
			settle(t, e)
			expect(t, get(t, e.URL()+path), 200, Hit, body)
		})
	}
	if n := o.requests.Load(); n != 3 {
		t.Errorf("origin saw %d requests for 3 objects; each must be fetched once", n)
	}
}

// TestOriginOverrunsContentLength: an origin that sends more body than its Content-Length on a
// keep-alive connection must not corrupt the next response on that connection.
func TestOriginOverrunsContentLength(t *testing.T) {
	t.Parallel()
	o := newRawOrigin(t, func(r *http.Request, c net.Conn) bool {
		if r.URL.Path == "/overrun" {
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 4\r\n\r\nbodyEXTRA-BYTES")
			return true
		}
		fmt.Fprint(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 4\r\n\r\nnext")
		return true
	})
	e := newEdge(t, o.URL(), nil)
	expect(t, get(t, e.URL()+"/overrun"), 200, Miss, "body")
	settle(t, e)
	for i := 0; i < 3; i++ {
		expect(t, get(t, fmt.Sprintf("%s/next%d", e.URL(), i)), 200, Miss, "next")
	}
}

// TestUpstreamFramingOnOneConnection: the upstream connection wrapper (edge/tefix.go) follows
// chunked, Content-Length, 1xx, 204 and 304 responses on one keep-alive connection; every
// response is read right and the connection is reused throughout.
func TestUpstreamFramingOnOneConnection(t *testing.T) {
	t.Parallel()
	o := newRawOrigin(t, func(r *http.Request, c net.Conn) bool {
		io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/chunked":
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n")
		case "/hints":
			fmt.Fprint(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\r\nhints")
		case "/nocontent":
			fmt.Fprint(c, "HTTP/1.1 204 No Content\r\n\r\n")
		case "/reval":
			if r.Header.Get("If-None-Match") == `"v"` {
				fmt.Fprint(c, "HTTP/1.1 304 Not Modified\r\nCache-Control: max-age=0\r\nEtag: \"v\"\r\n\r\n")
			} else {
				fmt.Fprint(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=0\r\nEtag: \"v\"\r\nContent-Length: 5\r\n\r\nreval")
			}
		default:
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 4\r\n\r\nlast")
		}
		return true
	})
	e := newEdge(t, o.URL(), nil)
	expect(t, get(t, e.URL()+"/chunked"), 200, Miss, "abcde")
	settle(t, e)
	expect(t, get(t, e.URL()+"/hints"), 200, Miss, "hints")
	settle(t, e)
	if r := do(t, http.MethodPost, e.URL()+"/nocontent"); r.status != 204 {
		t.Fatalf("POST /nocontent: %d", r.status)
	}
	expect(t, get(t, e.URL()+"/reval"), 200, Miss, "reval")
	settle(t, e)
	expect(t, get(t, e.URL()+"/reval"), 200, Revalidated, "reval")
	settle(t, e)
	expect(t, get(t, e.URL()+"/last"), 200, Miss, "last")
	if n := o.conns.Load(); n != 1 {
		t.Errorf("origin saw %d connections, want 1 reused for every response", n)
	}
}
