package edge

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestH2HitMatchesHTTP1Hit: an HTTP/2 hit (h2c on the plain listener, h2 over TLS) is answered
// by the fast path, and carries exactly the fields and body of the HTTP/1.1 hit of the same
// entry on the same listener: Age, X-Cache, Via, Cache-Status, the stored fields, the Date and
// sniffed Content-Type the HTTP/1.1 hit adds, Alt-Svc over TLS.
func TestH2HitMatchesHTTP1Hit(t *testing.T) {
	o := fastOrigin(t)
	e, clients, urls := frontDoorEdge(t, o.URL)
	type req struct {
		method, path string
		hdr          []string
	}
	reqs := []req{{"GET", "/obj", nil}, {"HEAD", "/obj", nil}, {"GET", "/sniff", nil}, {"HEAD", "/sniff", nil},
		{"GET", "/nodate", nil}, {"GET", "/big", nil}, {"GET", "/missing", nil},
		{"GET", "/vary", []string{"Accept-Encoding", "gzip"}}, {"GET", "/vary", []string{"Accept-Encoding", "br"}}}
	for _, pair := range [][2]string{{"plain", "h2c"}, {"tls", "h2"}} {
		h1c, h2c := clients[pair[0]], clients[pair[1]]
		base := urls[pair[0]]
		for _, r := range reqs {
			exchangeAs(t, h1c, r.method, base+r.path, r.hdr...) // the miss stores it
			settle(t, e)
			t.Run(pair[1]+" "+r.method+" "+r.path+strings.Join(r.hdr, ":"), func(t *testing.T) {
				var h1, h2 result
				for try := 0; try < 3; try++ { // Age and Date tick once a second
					h1 = exchangeAs(t, h1c, r.method, base+r.path, r.hdr...)
					before := e.stats.FastPath.Load()
					h2 = exchangeAs(t, h2c, r.method, base+r.path, r.hdr...)
					if got := e.stats.FastPath.Load() - before; got != 1 {
						t.Fatalf("fast path answered %d HTTP/2 requests, want 1", got)
					}
					if maps.EqualFunc(h1.h, h2.h, equalValues) {
						break
					}
				}
				if h1.cache() != "HIT" || h1.h.Get("Date") == "" || h1.h.Get("Content-Length") == "" {
					t.Fatalf("HTTP/1.1: %d %s, fields %v", h1.status, h1.cache(), h1.h)
				}
				if !maps.EqualFunc(h1.h, h2.h, equalValues) || h1.status != h2.status || h1.body != h2.body {
					t.Fatalf("HTTP/2 hit differs from HTTP/1.1's:\nHTTP/1.1 %d %v %q\nHTTP/2   %d %v %q",
						h1.status, h1.h, h1.body, h2.status, h2.h, h2.body)
				}
			})
		}
	}
}

// TestH2NonHitsTakeTheFullPath: HTTP/2 streams that ask for more than a plain fresh hit (a
// range, a precondition, a request directive, a stale entry, a body) are answered by the full
// path with its usual result, never by the fast path.
func TestH2NonHitsTakeTheFullPath(t *testing.T) {
	o := fastOrigin(t)
	e, clients, urls := frontDoorEdge(t, o.URL)
	c, base := clients["h2"], urls["h2"]
	for _, p := range []string{"/obj", "/stale"} {
		exchangeAs(t, c, "GET", base+p)
	}
	settle(t, e)
	cases := []struct {
		name, method, path string
		hdr                []string
		status             int
		cache              string
	}{
		{"range", "GET", "/obj", []string{"Range", "bytes=0-9"}, 206, "HIT"},
		{"precondition", "GET", "/obj", []string{"If-None-Match", `"v1"`}, 304, "HIT"},
		{"no-cache", "GET", "/obj", []string{"Cache-Control", "no-cache"}, 200, "MISS"},
		{"stale", "GET", "/stale", nil, 200, "MISS"},
		{"body", "POST", "/obj", nil, 200, "BYPASS"},
	}
	for _, tc := range cases {
		before := e.stats.FastPath.Load()
		r := exchangeAs(t, c, tc.method, base+tc.path, tc.hdr...)
		if r.status != tc.status || !strings.HasPrefix(r.cache(), tc.cache) {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.status, r.cache(), tc.status, tc.cache)
		}
		if got := e.stats.FastPath.Load() - before; got != 0 {
			t.Errorf("%s: answered by the fast path", tc.name)
		}
	}
}

// exchangeAs sends one request with client c (a POST with a short body) and reads the answer.
func exchangeAs(t *testing.T, c *http.Client, method, url string, hdr ...string) result {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("x")
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, string(b), resp.Header}
}

func equalValues(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }

// BenchmarkH2Hit measures a small HTTP/2 hit (h2c, one stream at a time on one connection, a
// raw client of x/net's Framer so that the edge's allocations are most of allocs/op).
func BenchmarkH2Hit(b *testing.B) {
	e, c := benchHitEdge(b)
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, bufio.NewReader(c))
	fr.SetReuseFrames()
	fr.WriteSettings()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", e.Addr()}, {":path", "/x"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			b.Fatal(err)
		}
		for done := false; !done; {
			f, err := fr.ReadFrame()
			if err != nil {
				b.Fatal(err)
			}
			switch f := f.(type) {
			case *http2.DataFrame:
				fr.WriteWindowUpdate(0, uint32(len(f.Data())))
				done = f.StreamEnded()
			case *http2.HeadersFrame:
				done = f.StreamEnded()
			case *http2.SettingsFrame:
				if !f.IsAck() {
					fr.WriteSettingsAck()
				}
			}
		}
	}
}
