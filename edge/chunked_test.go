package edge

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/h1/h1test"
)

// The edge reads chunked request bodies by the same strict rule as the L7 proxy: malformed
// framing is refused with 400 and a close before any of it goes upstream, and a valid body
// reaches the origin canonically framed with the same data.
func TestEdgeChunkedRequestBodies(t *testing.T) {
	head := "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
	bad := []struct{ name, body string }{
		{"bare LF size line", "5\nhello\r\n0\r\n\r\n"},
		{"space after size", "5 \r\nhello\r\n0\r\n\r\n"},
		{"space before size", " 5\r\nhello\r\n0\r\n\r\n"},
		{"empty line before size", "\r\n5\r\nhello\r\n0\r\n\r\n"},
		{"data without CRLF", "5\r\nhello0\r\n\r\n"},
		{"trailer without colon", "5\r\nhello\r\n0\r\nnot a field\r\n\r\n"},
		{"trailer folded", "5\r\nhello\r\n0\r\nX-A: b\r\n c\r\n\r\n"},
		{"extension without name", "5;\r\nhello\r\n0\r\n\r\n"},
		{"17 hex digits", "00000000000000005\r\nhello\r\n0\r\n\r\n"},
	}
	for _, fast := range []bool{true, false} {
		name := "fast"
		if !fast {
			name = "nethttp"
		}
		t.Run(name, func(t *testing.T) {
			o := h1test.StartLenientOrigin(t, nil)
			e := newEdge(t, "http://"+o.Addr, func(c *Config) { c.DisableFastPath = !fast })
			addr := e.Addr()
			exchange := func(t *testing.T, req string, split bool) (string, bool) {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if split {
					for i := range len(req) {
						c.Write([]byte{req[i]})
						time.Sleep(100 * time.Microsecond)
					}
				} else {
					io.WriteString(c, req)
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				b, err := io.ReadAll(c)
				return string(b), err == nil
			}
			for _, b := range bad {
				t.Run(b.name, func(t *testing.T) {
					got, closed := exchange(t, head+b.body, false)
					if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !closed {
						t.Errorf("answer %q (closed %v), want 400 and a close", got, closed)
					}
				})
			}
			if raw, _ := o.Received(); len(raw) > 0 {
				t.Fatalf("the origin received %q", raw)
			}
			body := "5;a=b\r\nhello\r\n000A\r\n0123456789\r\n0\r\nX-T: v\r\n\r\n"
			for _, split := range []bool{false, true} {
				got, _ := exchange(t, head+body+"GET /next HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", split)
				if strings.Count(got, "HTTP/1.1 200 OK") != 2 {
					t.Fatalf("answers %q, want two 200s", got)
				}
			}
			raw, targets := o.Received()
			if len(targets) != 4 || targets[0] != "/up" || targets[2] != "/up" {
				t.Fatalf("origin read %q", targets)
			}
			_, rest, _ := bytes.Cut(raw, []byte("\r\n\r\n"))
			framed, _, _ := bytes.Cut(rest, []byte("GET /next"))
			if data, ok := h1test.CanonicalChunks(framed); !ok || data != "hello0123456789" {
				t.Errorf("origin got body %q: canonical %v, data %q", framed, ok, data)
			}
		})
	}
}
