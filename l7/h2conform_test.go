package l7

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// dialH2Short is dialH2Raw with a deadline short enough that a missing answer fails the test
// quickly.
func dialH2Short(t *testing.T, addr string) *h2raw {
	h := dialH2Raw(t, addr)
	h.c.SetDeadline(time.Now().Add(5 * time.Second))
	return h
}

// rstOn waits for RST_STREAM on stream id and returns its code; a GOAWAY or the end of the
// connection first is an error.
func (h *h2raw) rstOn(id uint32) (http2.ErrCode, error) {
	f, err := h.until(func(f http2.Frame) bool {
		switch f := f.(type) {
		case *http2.RSTStreamFrame:
			return f.StreamID == id
		case *http2.GoAwayFrame:
			return true
		}
		return false
	})
	if err != nil {
		return 0, err
	}
	if g, ok := f.(*http2.GoAwayFrame); ok {
		return 0, &goAwayError{g.ErrCode}
	}
	return f.(*http2.RSTStreamFrame).ErrCode, nil
}

type goAwayError struct{ code http2.ErrCode }

func (e *goAwayError) Error() string { return "connection error: GOAWAY " + e.code.String() }

// stillServes checks that the connection serves a new stream id: no frame before its answer
// was a GOAWAY or an RST_STREAM (other than on the streams in ok).
func (h *h2raw) stillServes(t *testing.T, id uint32, ok ...uint32) {
	t.Helper()
	h.get(id, "/alive")
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("stream %d after the test frames: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			t.Fatalf("GOAWAY %v before stream %d was answered", f.ErrCode, id)
		case *http2.RSTStreamFrame:
			expected := false
			for _, o := range ok {
				expected = expected || o == f.StreamID
			}
			if !expected {
				t.Fatalf("RST_STREAM %v on stream %d before stream %d was answered", f.ErrCode, f.StreamID, id)
			}
		case *http2.DataFrame:
			if f.StreamID == id && f.StreamEnded() {
				if !strings.Contains(string(f.Data()), "/alive") {
					t.Fatalf("stream %d: body %q", id, f.Data())
				}
				return
			}
		}
	}
}

// RFC 9113 5.1: a frame on a stream the client reset, or after the stream closed, is a stream
// error STREAM_CLOSED; frames the client sent on a stream before our RST_STREAM reached it
// are ignored (not a connection error). Either way the connection goes on.
func TestH2FramesOnClosedStreams(t *testing.T) {
	b := startBackend(t, "b", nil)
	p := h2Proxy(t, oneRoute("", b.addr))
	post := []string{":method", "POST", ":scheme", "http", ":path", "/x", ":authority", "a"}

	t.Run("DATA after the client's RST_STREAM", func(t *testing.T) {
		h := dialH2Short(t, p.addr)
		h.headers(1, false, post...)
		h.fr.WriteRSTStream(1, http2.ErrCodeCancel)
		h.fr.WriteData(1, true, []byte("late"))
		if code, err := h.rstOn(1); err != nil || code != http2.ErrCodeStreamClosed {
			t.Fatalf("got RST_STREAM %v (%v), want STREAM_CLOSED", code, err)
		}
		h.stillServes(t, 3)
	})
	t.Run("HEADERS after the client's RST_STREAM", func(t *testing.T) {
		h := dialH2Short(t, p.addr)
		h.headers(1, false, post...)
		h.fr.WriteRSTStream(1, http2.ErrCodeCancel)
		h.headers(1, true, "x-trailer", "1")
		if code, err := h.rstOn(1); err != nil || code != http2.ErrCodeStreamClosed {
			t.Fatalf("got RST_STREAM %v (%v), want STREAM_CLOSED", code, err)
		}
		h.stillServes(t, 3)
	})
	t.Run("DATA after the stream closed", func(t *testing.T) {
		h := dialH2Short(t, p.addr)
		h.get(1, "/x")
		if status, _, _, err := h.streamEnd(1); err != nil || status != "200" {
			t.Fatalf("stream 1: %q %v", status, err)
		}
		h.fr.WriteData(1, true, []byte("late"))
		if code, err := h.rstOn(1); err != nil || code != http2.ErrCodeStreamClosed {
			t.Fatalf("got RST_STREAM %v (%v), want STREAM_CLOSED", code, err)
		}
		h.stillServes(t, 3)
	})
	t.Run("body and trailers in flight after our RST_STREAM are ignored", func(t *testing.T) {
		h := dialH2Short(t, p.addr)
		// Malformed (an uppercase name): refused at once with PROTOCOL_ERROR while the client
		// still sends the body and its trailers.
		h.headers(1, false, append(post, "X-Upper", "1")...)
		h.fr.WriteData(1, false, []byte("body"))
		h.headers(1, true, "x-trailer", "1")
		if code, err := h.rstOn(1); err != nil || code != http2.ErrCodeProtocol {
			t.Fatalf("got RST_STREAM %v (%v), want PROTOCOL_ERROR", code, err)
		}
		h.stillServes(t, 3)
	})
}

// RFC 9113 5.3.1: a stream that depends on itself is a stream error PROTOCOL_ERROR, in a
// PRIORITY frame (on any stream, idle included) and in HEADERS (the request never runs).
func TestH2SelfDependentStreams(t *testing.T) {
	b := startBackend(t, "b", nil)
	p := h2Proxy(t, oneRoute("", b.addr))
	h := dialH2Short(t, p.addr)
	h.fr.WritePriority(1, http2.PriorityParam{StreamDep: 1, Weight: 255})
	if code, err := h.rstOn(1); err != nil || code != http2.ErrCodeProtocol {
		t.Fatalf("PRIORITY on itself: RST_STREAM %v (%v), want PROTOCOL_ERROR", code, err)
	}
	h.hbuf.Reset()
	for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/x"}, {":authority", "a"}} {
		h.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: h.hbuf.Bytes(), EndStream: true,
		EndHeaders: true, Priority: http2.PriorityParam{StreamDep: 3, Weight: 255}})
	if code, err := h.rstOn(3); err != nil || code != http2.ErrCodeProtocol {
		t.Fatalf("HEADERS on itself: RST_STREAM %v (%v), want PROTOCOL_ERROR", code, err)
	}
	// A dependency on another stream is fine (and ignored).
	h.fr.WritePriority(5, http2.PriorityParam{StreamDep: 1, Weight: 10})
	h.stillServes(t, 7)
	if n := b.hits.Load(); n != 1 {
		t.Errorf("the backend got %d requests, want 1 (the self-dependent one never runs)", n)
	}
}

// An invalid connection preface is a connection error (RFC 9113 3.4). On an h2c listener,
// which also serves HTTP/1.1, a first line that is neither HTTP/1.x nor the HTTP/2 preface
// closes the connection without an answer (an HTTP/2 client would read an HTTP/1.1 400 as
// frames); so does a preface that starts right and goes wrong. HTTP/1.x lines still get
// their 400, and so does anything on a listener without h2c or over TLS.
func TestH2CInvalidPreface(t *testing.T) {
	b := startBackend(t, "b", nil)
	cfg := oneRoute("", b.addr)
	answer := func(t *testing.T, p *engineProxy, send string) string {
		t.Helper()
		c, br := p.dial(t)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(br)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%q: %v after %q", send, err, got)
		}
		return string(got)
	}
	const invalid = "INVALID CONNECTION PREFACE\r\n\r\n"
	for _, e := range []engine{{name: "loops"}, {name: "goroutines", noLoops: true}} {
		t.Run(e.name, func(t *testing.T) {
			p := e.start(t, cfg)
			for _, send := range []string{invalid, "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", "\r\nGET /x\r\n\r\n"} {
				if got := answer(t, p, send); got != "" {
					t.Errorf("%q: answered %q, want the connection closed", send, got)
				}
			}
			if got := answer(t, p, "GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200") {
				t.Errorf("HTTP/1.1 request: %q", got)
			}
			if got := answer(t, p, "GET /x HTTP/1.1\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 400") {
				t.Errorf("HTTP/1.1 request without Host: %q, want 400", got)
			}
		})
	}
	t.Run("without h2c", func(t *testing.T) {
		parsed, err := ParseConfig([]byte(cfg))
		if err != nil {
			t.Fatal(err)
		}
		s, err := NewServer(parsed, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go s.serveFast(ln, false, "http")
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			s.Shutdown(ctx)
		})
		if got := answer(t, &engineProxy{s: s, addr: ln.Addr().String()}, invalid); !strings.HasPrefix(got, "HTTP/1.1 400") {
			t.Errorf("%q: %q, want 400", invalid, got)
		}
	})
	t.Run("HTTP/1.1 over TLS", func(t *testing.T) {
		p := engine{name: "tls", tls: true}.start(t, cfg)
		if got := answer(t, p, invalid); !strings.HasPrefix(got, "HTTP/1.1 400") {
			t.Errorf("%q: %q, want 400", invalid, got)
		}
	})
}

// Trailers from clients are checked like headers (RFC 9113 8.1, 8.2): a field that would be
// malformed in the headers, a pseudo-header, or a section over max_header_bytes is a stream
// error PROTOCOL_ERROR (the request is already upstream: the stream is reset) and the
// connection goes on; valid trailers end the request (and are dropped).
func TestH2TrailersAreCheckedLikeHeaders(t *testing.T) {
	b := startBackend(t, "b", nil)
	p := h2Proxy(t, `
limits: {max_header_bytes: 4096}
`+oneRoute("", b.addr))
	post := []string{":method", "POST", ":scheme", "http", ":path", "/x", ":authority", "a"}
	big := strings.Repeat("v", 1500)
	cases := map[string][]string{
		"pseudo-header":         {":path", "/y"},
		"pseudo-header status":  {":status", "200"},
		"uppercase name":        {"X-Upper", "1"},
		"space in name":         {"x a", "1"},
		"empty name":            {"", "1"},
		"connection":            {"connection", "close"},
		"transfer-encoding":     {"transfer-encoding", "chunked"},
		"keep-alive":            {"keep-alive", "5"},
		"upgrade":               {"upgrade", "h2c"},
		"te gzip":               {"te", "gzip"},
		"CRLF in value":         {"x-a", "1\r\nx-injected: 1"},
		"LF in value":           {"x-a", "1\nGET /smuggled HTTP/1.1"},
		"NUL in value":          {"x-a", "a\x00b"},
		"space around value":    {"x-a", "1 "},
		"over max_header_bytes": {"x-a", big, "x-b", big, "x-c", big},
	}
	h := dialH2Short(t, p.addr)
	id := uint32(1)
	for name, trailer := range cases {
		h.headers(id, false, post...)
		h.fr.WriteData(id, false, []byte("body"))
		h.headers(id, true, trailer...)
		status, _, rst, err := h.streamEnd(id)
		if err != nil {
			t.Fatalf("%s: connection failed: %v", name, err)
		}
		if rst != http2.ErrCodeProtocol {
			t.Errorf("%s: got status %q rst %v, want RST_STREAM PROTOCOL_ERROR", name, status, rst)
		}
		id += 2
	}
	// Valid trailers (grpc-status and the like) end the request; the connection went on.
	h.headers(id, false, post...)
	h.fr.WriteData(id, false, []byte("body"))
	h.headers(id, true, "x-checksum", "abc", "grpc-status", "0")
	if status, body, rst, err := h.streamEnd(id); err != nil || status != "200" || string(body) != "b POST /x body=4" {
		t.Fatalf("valid trailers: %q %q rst %v err %v", status, body, rst, err)
	}
	// A trailer block that never ends is a CONTINUATION flood like a header block that never
	// ends: the connection is closed (ENHANCE_YOUR_CALM) without decoding it.
	h = dialH2Short(t, p.addr)
	h.headers(1, false, post...)
	h.fr.WriteData(1, false, []byte("body"))
	h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte{0x40, 1, 'x', 1, 'y'}, EndStream: true})
	h.continuationFlood(t, 100, 200, "an endless trailer block")
}

// The control-frame and empty-frame flood guards: PING and SETTINGS sent faster than the
// client reads the answers (over 1 MiB of them queued) and endless empty DATA frames close
// the connection instead of growing the proxy's buffers or costing it a loop per frame.
// (Rapid reset and CONTINUATION floods: h2proto_test.go.)
func TestH2ControlAndEmptyFrameFloodsAreCut(t *testing.T) {
	b := startBackend(t, "b", nil)
	p := h2Proxy(t, oneRoute("", b.addr))
	// unread sends n frames on a connection whose client reads nothing (a small receive buffer,
	// so the answers back up in the proxy, not in the kernel) and returns how many went out
	// before the proxy closed the connection.
	unread := func(t *testing.T, n int, send func(*http2.Framer) error) int {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) {
				_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			})
		}}
		c, err := d.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		io.WriteString(c, http2.ClientPreface)
		bw := bufio.NewWriterSize(c, 64<<10) // a write per 64 KiB of frames, not per frame
		fr := http2.NewFramer(bw, nil)
		fr.WriteSettings()
		for i := range n {
			if err := send(fr); err != nil {
				return i
			}
		}
		if bw.Flush() != nil {
			return n - bw.Buffered()/9 // roughly: what the last write did not take
		}
		return n
	}
	t.Run("PING", func(t *testing.T) {
		// 17 MB of answers: far more than the proxy may queue (1 MiB, and as much again being
		// written) plus what the kernel holds (a send buffer of up to 4 MiB).
		const n = 1_000_000
		var data [8]byte
		if sent := unread(t, n, func(fr *http2.Framer) error { return fr.WritePing(false, data) }); sent == n {
			t.Errorf("the proxy took all %d PINGs from a client that reads none of the answers", n)
		}
	})
	t.Run("SETTINGS", func(t *testing.T) {
		const n = 2_000_000 // 18 MB of answers
		if sent := unread(t, n, func(fr *http2.Framer) error { return fr.WriteSettings() }); sent == n {
			t.Errorf("the proxy took all %d SETTINGS from a client that reads none of the answers", n)
		}
	})
	t.Run("empty DATA", func(t *testing.T) {
		h := dialH2Short(t, p.addr)
		h.headers(1, false, ":method", "POST", ":scheme", "http", ":path", "/x", ":authority", "a")
		var werr error
		for i := 0; i < 2000 && werr == nil; i++ {
			werr = h.fr.WriteData(1, false, nil)
		}
		f, err := h.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
		if err != nil {
			t.Fatalf("no GOAWAY for endless empty DATA frames (write: %v): %v", werr, err)
		}
		if code := f.(*http2.GoAwayFrame).ErrCode; code != http2.ErrCodeEnhanceYourCalm {
			t.Errorf("GOAWAY code %v, want ENHANCE_YOUR_CALM", code)
		}
	})
}
