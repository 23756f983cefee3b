package l7

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/h1/h1test"
	"github.com/switchyard/switchyard/internal/testutil"
)

// chunkVariant is a way a chunked body is forwarded: by the request core as such, by the core
// with a retry policy that buffers the body, and by net/http (a sticky pool is handed to it).
type chunkVariant struct {
	name, route, pool string
	core              bool // the request core forwards it, so the framing must be exactly canonical
}

var chunkVariants = []chunkVariant{
	{name: "core", core: true},
	{name: "retry", route: ", retry: {attempts: 1, non_idempotent: true, buffer_body: 1}", core: true},
	{name: "nethttp", pool: ", balance: sticky"},
}

// chunkEngines runs test on every engine (onEveryEngine: event loops, goroutines, TLS,
// host-name backends) for every chunkVariant.
func chunkEngines(t *testing.T, test func(t *testing.T, v chunkVariant)) {
	onEveryEngine(t, func(t *testing.T) {
		for _, v := range chunkVariants {
			t.Run(v.name, func(t *testing.T) { test(t, v) })
		}
	})
}

// startChunkProxy serves a one-route proxy in front of o and returns its base URL.
func startChunkProxy(t *testing.T, o *h1test.LenientOrigin, v chunkVariant) string {
	t.Helper()
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
timeouts: {read_header: 2s}
routes: [{name: all, pool: p%s}]
pools: [{name: p, backends: [{address: %q}]%s}]
`, v.route, o.Addr, v.pool))
	return base
}

// dialChunkProxy opens a raw connection to the proxy at base.
func dialChunkProxy(t *testing.T, base string) net.Conn {
	t.Helper()
	c, err := dialBase(base)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// readAnswer reads what the proxy sends on c until it closes or the deadline passes.
func readAnswer(c net.Conn, d time.Duration) (string, bool) {
	c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	return string(b), err == nil // nil: the proxy closed the connection
}

const chunkHead = "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"

// Malformed chunked framing is refused with 400 and a close, and none of it reaches the origin.
func TestChunkedMalformedIsRefused(t *testing.T) {
	bodies := []struct{ name, body string }{
		{"bare LF size line", "5\nhello\r\n0\r\n\r\n"},
		{"bare LF after data", "5\r\nhello\n0\r\n\r\n"},
		{"bare LF last chunk", "5\r\nhello\r\n0\n\r\n"},
		{"bare LF end", "5\r\nhello\r\n0\r\n\n"},
		{"space before size", " 5\r\nhello\r\n0\r\n\r\n"},
		{"space after size", "5 \r\nhello\r\n0\r\n\r\n"},
		{"tab after size", "5\t\r\nhello\r\n0\r\n\r\n"},
		{"empty line before size", "\r\n5\r\nhello\r\n0\r\n\r\n"},
		{"empty line between chunks", "5\r\nhello\r\n\r\n0\r\n\r\n"},
		{"data without CRLF", "5\r\nhello0\r\n\r\n"},
		{"bare CR in size line", "5\rx\r\nhello\r\n0\r\n\r\n"},
		{"trailer without colon", "5\r\nhello\r\n0\r\nnot a field\r\n\r\n"},
		{"trailer folded", "5\r\nhello\r\n0\r\nX-A: b\r\n c\r\n\r\n"},
		{"trailer space before colon", "5\r\nhello\r\n0\r\nX-A : b\r\n\r\n"},
		{"trailer NUL", "5\r\nhello\r\n0\r\nX-A: b\x00c\r\n\r\n"},
		{"extension without name", "5;\r\nhello\r\n0\r\n\r\n"},
		{"extension bad value", "5;a=\"b\r\nhello\r\n0\r\n\r\n"},
		{"size sign", "+5\r\nhello\r\n0\r\n\r\n"},
		{"size 0x", "0x5\r\nhello\r\n0\r\n\r\n"},
		{"17 hex digits", "00000000000000005\r\nhello\r\n0\r\n\r\n"},
		{"size over int63", "8000000000000000\r\nhello\r\n0\r\n\r\n"},
	}
	chunkEngines(t, func(t *testing.T, v chunkVariant) {
		o := h1test.StartLenientOrigin(t, nil)
		base := startChunkProxy(t, o, v)
		for _, b := range bodies {
			t.Run(b.name, func(t *testing.T) {
				c := dialChunkProxy(t, base)
				defer c.Close()
				io.WriteString(c, chunkHead+b.body)
				got, closed := readAnswer(c, 5*time.Second)
				if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !closed {
					t.Errorf("answer %q (closed %v), want 400 and a close", got, closed)
				}
			})
		}
		if got, _ := o.Received(); len(got) > 0 {
			t.Errorf("the origin received %q", got)
		}
	})
}

// A request hidden after chunk data that lacks its CRLF never reaches a lenient origin.
func TestChunkedSmuggledRequestNeverReachesOrigin(t *testing.T) {
	hidden := "GET /smuggled HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n"
	// The proxy of old read "110" after "abc" as the next chunk size (0x110 bytes of data); the
	// origin skips "11" as the CRLF it expects there, reads "0" as the last chunk, and then the
	// hidden request.
	pad := 0x110 - 2 - len(fmt.Sprintf(hidden, 100))
	data := "\r\n" + fmt.Sprintf(hidden, pad) + strings.Repeat("p", pad)
	body := "3\r\nabc" + "110\r\n" + data + "\r\n0\r\n\r\n"
	if len(data) != 0x110 {
		t.Fatalf("data is %d bytes", len(data))
	}
	chunkEngines(t, func(t *testing.T, v chunkVariant) {
		o := h1test.StartLenientOrigin(t, nil)
		base := startChunkProxy(t, o, v)
		c := dialChunkProxy(t, base)
		defer c.Close()
		io.WriteString(c, chunkHead+body+"GET /after HTTP/1.1\r\nHost: a\r\n\r\n")
		got, closed := readAnswer(c, 5*time.Second)
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !closed {
			t.Errorf("answer %q (closed %v), want 400 and a close", got, closed)
		}
		deadline := time.Now().Add(500 * time.Millisecond)
		for time.Now().Before(deadline) {
			if _, targets := o.Received(); len(targets) > 0 {
				t.Fatalf("the origin read requests %q", targets)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// Valid chunked bodies reach the origin re-framed canonically, with the same body bytes, however
// they are split across TCP writes.
func TestChunkedBodyIsReframed(t *testing.T) {
	var tiny, tinyWant strings.Builder
	for i := range 100 {
		fmt.Fprintf(&tiny, "1\r\n%c\r\n", 'a'+i%26)
		fmt.Fprintf(&tinyWant, "1\r\n%c\r\n", 'a'+i%26)
	}
	tiny.WriteString("0\r\n\r\n")
	tinyWant.WriteString("0\r\n\r\n")
	cases := []struct {
		name, body, want string
		split            bool
	}{
		{"extensions and trailers",
			"5;a=b;c=\"d \\\"e\\\"\" ; f\r\nhello\r\n000A\r\n0123456789\r\n0;last\r\nX-T: v\r\nX-U:w\r\n\r\n",
			"5\r\nhello\r\na\r\n0123456789\r\n0\r\nX-T: v\r\nX-U: w\r\n\r\n", false},
		{"many tiny chunks", tiny.String(), tinyWant.String(), false},
		{"byte by byte", "1F\r\n" + strings.Repeat("x", 31) + "\r\n1;e=1\r\ny\r\n0\r\nT: 1\r\n\r\n",
			"1f\r\n" + strings.Repeat("x", 31) + "\r\n1\r\ny\r\n0\r\nT: 1\r\n\r\n", true},
	}
	chunkEngines(t, func(t *testing.T, v chunkVariant) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				o := h1test.StartLenientOrigin(t, nil)
				base := startChunkProxy(t, o, v)
				c := dialChunkProxy(t, base)
				defer c.Close()
				req := chunkHead + tc.body + "GET /next HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
				if tc.split {
					for i := range len(req) {
						if _, err := c.Write([]byte{req[i]}); err != nil {
							t.Fatal(err)
						}
						time.Sleep(100 * time.Microsecond)
					}
				} else {
					io.WriteString(c, req)
				}
				got, _ := readAnswer(c, 5*time.Second)
				if strings.Count(got, "HTTP/1.1 200 OK") != 2 {
					t.Fatalf("answers %q, want two 200s", got)
				}
				raw, targets := o.Received()
				if len(targets) != 2 || targets[0] != "/up" || targets[1] != "/next" {
					t.Fatalf("origin read %q", targets)
				}
				_, rest, _ := bytes.Cut(raw, []byte("\r\n\r\n"))
				body, _, _ := bytes.Cut(rest, []byte("GET /next"))
				if v.core && string(body) != tc.want {
					t.Errorf("origin got body framing %q, want %q", body, tc.want)
				}
				// net/http re-chunks the body as it reads it: the data must match, the framing
				// must be canonical.
				data, ok := h1test.CanonicalChunks(body)
				want, _ := h1test.CanonicalChunks([]byte(tc.want))
				if !ok || data != want {
					t.Errorf("origin got %q: canonical %v, data %q, want %q", body, ok, data, want)
				}
			})
		}
	})
}

// Chunked responses reach the client re-framed canonically (trailer fields included);
// malformed ones never pass as they are.
func TestChunkedResponseIsReframed(t *testing.T) {
	chunkEngines(t, func(t *testing.T, v chunkVariant) {
		o := h1test.StartLenientOrigin(t, func(target string) string {
			h := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			if target == "/bad" {
				return h + "3\nabc\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nhidden"
			}
			return h + "3;x=\"y\"\r\nabc\r\n00B\r\n0123456789a\r\n0\r\nT: v\r\n\r\n"
		})
		base := startChunkProxy(t, o, v)
		for _, target := range []string{"/good", "/bad"} {
			c := dialChunkProxy(t, base)
			io.WriteString(c, "GET "+target+" HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
			got, _ := readAnswer(c, 5*time.Second)
			c.Close()
			_, body, _ := strings.Cut(got, "\r\n\r\n")
			data, ok := h1test.CanonicalChunks([]byte(body))
			switch {
			case target == "/good" && (!ok || data != "abc0123456789a"):
				t.Errorf("%s: client got %q, want canonical chunks of abc0123456789a", target, got)
			case target == "/good" && v.core && body != "3\r\nabc\r\nb\r\n0123456789a\r\n0\r\nT: v\r\n\r\n":
				t.Errorf("%s: client got body framing %q", target, body)
			case target == "/bad" && (strings.Contains(got, "3\nabc") || strings.Contains(got, "hidden")):
				t.Errorf("%s: the malformed response reached the client: %q", target, got)
			}
		}
	})
}

// Malformed framing that arrives after the head and a first chunk were streamed to the origin
// (an upload on the goroutine engine, where the loops hand it) is refused with 400 and a close,
// and the origin never sees a complete body.
func TestChunkedStreamedMalformedIsRefused(t *testing.T) {
	chunkEngines(t, func(t *testing.T, v chunkVariant) {
		if !v.core {
			t.Skip("net/http streams uploads on its own; the guard's body screening is tested in internal/h1")
		}
		o := h1test.StartLenientOrigin(t, nil)
		base := startChunkProxy(t, o, v)
		c := dialChunkProxy(t, base)
		defer c.Close()
		io.WriteString(c, chunkHead+"5\r\nhello\r\n")
		testutil.Eventually(t, 10*time.Second, func() bool { raw, _ := o.Received(); return bytes.Contains(raw, []byte("hello")) },
			"the first chunk never reached the origin")
		io.WriteString(c, "5\nworld\r\n0\r\n\r\n")
		got, closed := readAnswer(c, 5*time.Second)
		if !strings.HasPrefix(got, "HTTP/1.1 400 ") || !closed {
			t.Errorf("answer %q (closed %v), want 400 and a close", got, closed)
		}
		if raw, targets := o.Received(); bytes.Contains(raw, []byte("world")) || bytes.Contains(raw, []byte("0\r\n\r\n")) || len(targets) != 1 {
			t.Errorf("the origin received %q (requests %q)", raw, targets)
		}
	})
}
