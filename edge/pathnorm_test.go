package edge

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

// recordingOrigin is a real origin that answers every request with a cacheable copy of the
// target it received, and records each request line as it arrived.
func recordingOrigin(t *testing.T) *rawOrigin {
	return newRawOrigin(t, func(r *http.Request, c net.Conn) bool {
		body := r.RequestURI
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		return true
	})
}

func (o *rawOrigin) received() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, r := range o.heads {
		out = append(out, r.Method+" "+r.RequestURI)
	}
	return out
}

// CONNECT is refused (405, a body saying why) and never reaches the origin: the edge is its
// origin's reverse proxy, not a tunnel to any host:port.
func TestEdgeRefusesConnect(t *testing.T) {
	o := recordingOrigin(t)
	e := newEdge(t, o.URL(), nil)
	for _, target := range []string{o.ln.Addr().String(), "www.example.com:443"} {
		c := sendRaw(t, e.Addr(), "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
		resp, body := parsed(t, bufio.NewReader(c), http.MethodConnect)
		c.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || !strings.Contains(body, "CONNECT") || resp.Header.Get("Allow") == "" {
			t.Errorf("CONNECT %s: %d %q (Allow %q); want 405 saying the edge does not tunnel CONNECT", target, resp.StatusCode, body, resp.Header.Get("Allow"))
		}
	}
	if got := o.received(); len(got) != 0 {
		t.Errorf("the origin received %q; want nothing", got)
	}
}

// The edge keys and forwards the normalised path, as the L7 proxy does: dot segments resolved,
// repeated slashes merged, so "/a/../admin" is the origin's "/admin" (and the same cache entry);
// a path an origin could decode differently (an encoded slash) is refused.
func TestEdgeNormalizesPaths(t *testing.T) {
	o := recordingOrigin(t)
	e := newEdge(t, o.URL(), nil)
	get := func(target string) (int, string, string) {
		c := sendRaw(t, e.Addr(), "GET "+target+" HTTP/1.1\r\nHost: www.example.com\r\n\r\n")
		defer c.Close()
		resp, body := parsed(t, bufio.NewReader(c), http.MethodGet)
		return resp.StatusCode, resp.Header.Get("X-Cache"), body
	}
	for _, c := range []struct{ target, origin string }{
		{"/tracking/../admin", "/admin"},
		{"//static//app.js?v=1", "/static/app.js?v=1"},
		{"/a/./b/", "/a/b/"},
		{"/../../etc/passwd", "/etc/passwd"},
	} {
		if status, _, body := get(c.target); status != http.StatusOK || body != c.origin {
			t.Errorf("GET %s: %d, the origin got %q; want %q", c.target, status, body, c.origin)
		}
	}
	// The normalised form is the cache key: the plain path hits what the dotted one stored.
	if status, cache, body := get("/admin"); status != http.StatusOK || body != "/admin" || !strings.HasPrefix(cache, "HIT") {
		t.Errorf("GET /admin after GET /tracking/../admin: %d %s %q; want a hit", status, cache, body)
	}
	before := len(o.received())
	if status, _, body := get("/a%2f..%2fadmin"); status != http.StatusBadRequest || !strings.Contains(body, "%2F") {
		t.Errorf("GET with an encoded slash: %d %q; want 400 naming it", status, body)
	}
	want := []string{"GET /admin", "GET /static/app.js?v=1", "GET /a/b/", "GET /etc/passwd"}
	if got := o.received(); len(got) != before || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the origin received %q; want %q", got, want)
	}
}
