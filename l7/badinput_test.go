package l7

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestRequestSmugglingShapesAreRefused(t *testing.T) {
	b := startBackend(t, "b", nil)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
limits: {max_header_bytes: 8192}
timeouts: {read_header: 500ms}
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
	cases := []struct{ name, raw, want string }{
		{"CL with TE", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
		{"TE with CL", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", "400"},
		{"duplicate CL same value", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", "400"},
		{"duplicate CL different", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "400"},
		{"CL list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 3\r\n\r\nabc", "400"},
		{"CL sign", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +3\r\n\r\nabc", "400"},
		{"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n c\r\n\r\n", "400"},
		{"space before colon", "GET / HTTP/1.1\r\nHost: a\r\nX-A : b\r\n\r\n", "400"},
		{"invalid name", "GET / HTTP/1.1\r\nHost: a\r\nX(A): b\r\n\r\n", "400"},
		{"TE not ending chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", "400"},
		{"oversized header", "GET / HTTP/1.1\r\nHost: a\r\nX-A: " + strings.Repeat("a", 9000) + "\r\n\r\n", "431"},
		{"good", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", "200"},
	}
	for _, c := range cases {
		line := rawExchange(t, base, c.raw)
		if !strings.Contains(line, " "+c.want+" ") && !strings.HasSuffix(line, " "+c.want) {
			t.Errorf("%s: got %q, want %s", c.name, line, c.want)
		}
	}
	if b.hits.Load() != 1 {
		t.Errorf("backend saw %d requests, want only the good one", b.hits.Load())
	}
}

// A smuggled request hidden after a chunked body on a keep-alive connection is screened too:
// the guard follows framing, so it inspects the second head.
func TestGuardFollowsKeepAliveFraming(t *testing.T) {
	b := startBackend(t, "b", nil)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"+
		"POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi"+
		"GET /c HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx")
	var all []byte
	buf := make([]byte, 8192)
	for {
		n, err := c.Read(buf)
		all = append(all, buf[:n]...)
		if err != nil {
			break
		}
	}
	out := string(all)
	if got := strings.Count(out, "HTTP/1.1 200 OK"); got != 2 {
		t.Errorf("got %d OK responses, want 2:\n%s", got, out)
	}
	if !strings.Contains(out, "HTTP/1.1 400 Bad Request") {
		t.Errorf("third, smuggling-shaped request was not refused:\n%s", out)
	}
	if b.hits.Load() != 2 {
		t.Errorf("backend saw %d requests, want 2", b.hits.Load())
	}
}

// A slowloris client trickling its head is cut off by the header timeout.
func TestSlowlorisIsCutOff(t *testing.T) {
	b := startBackend(t, "b", nil)
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
timeouts: {read_header: 300ms}
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: a\r\n")
	closed := false
	for i := 0; i < 30; i++ {
		time.Sleep(100 * time.Millisecond)
		if _, err := fmt.Fprint(c, "X-Slow: 1\r\n"); err != nil {
			closed = true
			break
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		one := make([]byte, 1)
		if _, err := c.Read(one); err != nil && !isTimeout(err) {
			closed = true
			break
		}
	}
	if !closed {
		t.Fatalf("slow client still connected after %v", time.Since(start))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("cut off after %v, want about the 300ms header timeout", d)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
