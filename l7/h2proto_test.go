package l7

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/switchyard/switchyard/internal/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2raw is a hand-driven HTTP/2 client (x/net's Framer and HPACK encoder), for what a
// well-behaved client never sends: bad pseudo-headers, floods, a window that never opens.
type h2raw struct {
	t    *testing.T
	c    net.Conn
	fr   *http2.Framer
	enc  *hpack.Encoder
	hbuf bytes.Buffer
}

func dialH2Raw(t *testing.T, addr string, settings ...http2.Setting) *h2raw {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	h := &h2raw{t: t, c: c, fr: http2.NewFramer(c, c)}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.hbuf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := h.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return h
}

// headers opens stream id with the given field pairs (raw: no checks).
func (h *h2raw) headers(id uint32, end bool, pairs ...string) error {
	h.hbuf.Reset()
	for i := 0; i+1 < len(pairs); i += 2 {
		h.enc.WriteField(hpack.HeaderField{Name: pairs[i], Value: pairs[i+1]})
	}
	return h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.hbuf.Bytes(),
		EndStream: end, EndHeaders: true})
}

// get opens a GET stream for path.
func (h *h2raw) get(id uint32, path string, extra ...string) error {
	return h.headers(id, true, append([]string{":method", "GET", ":scheme", "http", ":path", path, ":authority", "a"}, extra...)...)
}

// until reads frames until match says stop, and returns that frame (nil when the connection
// ended first; err says how).
func (h *h2raw) until(match func(http2.Frame) bool) (http2.Frame, error) {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if match(f) {
			return f, nil
		}
	}
}

// streamEnd waits for stream id to end: its status and body, or the RST_STREAM code.
func (h *h2raw) streamEnd(id uint32) (status string, body []byte, rst http2.ErrCode, err error) {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return status, body, 0, err
		}
		if f.Header().StreamID != id {
			continue
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" && s[0] != '1' {
				status = s
			}
			if f.StreamEnded() {
				return status, body, 0, nil
			}
		case *http2.DataFrame:
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				return status, body, 0, nil
			}
		case *http2.RSTStreamFrame:
			return status, body, f.ErrCode, nil
		}
	}
}

func h2Proxy(t *testing.T, yamlText string) *engineProxy {
	t.Helper()
	return engine{name: "h2c", h2: true}.start(t, yamlText)
}

// Malformed requests (RFC 9113 8.1.1, 8.2, 8.3) are stream errors PROTOCOL_ERROR and never
// reach the backend; the connection keeps serving the next stream.
func TestH2MalformedRequestsAreStreamErrors(t *testing.T) {
	b := startBackend(t, "b", nil)
	p := h2Proxy(t, oneRoute("", b.addr))
	base := []string{":method", "GET", ":scheme", "http", ":path", "/x", ":authority", "a"}
	without := func(name string) []string {
		var out []string
		for i := 0; i < len(base); i += 2 {
			if base[i] != name {
				out = append(out, base[i], base[i+1])
			}
		}
		return out
	}
	cases := map[string][]string{
		"missing :path":             without(":path"),
		"missing :method":           without(":method"),
		"missing :scheme":           without(":scheme"),
		"uppercase name":            append(base, "X-Upper", "1"),
		"connection header":         append(base, "connection", "close"),
		"transfer-encoding":         append(base, "transfer-encoding", "chunked"),
		"keep-alive":                append(base, "keep-alive", "5"),
		"upgrade":                   append(base, "upgrade", "websocket"),
		"te gzip":                   append(base, "te", "gzip"),
		"pseudo after regular":      append(append([]string{}, without(":authority")...), "x-a", "1", ":authority", "a"),
		"unknown pseudo":            append(base, ":foo", "1"),
		"protocol pseudo":           append(base, ":protocol", "websocket"),
		"duplicate :path":           append(base[:6:6], ":path", "/y", ":authority", "a"),
		"CRLF in value":             append(base, "x-a", "1\r\nx-injected: 1"),
		"LF in value":               append(base, "x-a", "1\nGET /smuggled HTTP/1.1"),
		"NUL in value":              append(base, "x-a", "a\x00b"),
		"space around value":        append(base, "x-a", " 1"),
		"host differs":              append(base, "host", "b"),
		"path not origin form":      append(without(":path"), ":path", "http://a/x"),
		"space in path":             append(without(":path"), ":path", "/a b"),
		"bad content-length":        append(base, "content-length", "1x"),
		"two content-lengths":       append(base, "content-length", "1", "content-length", "2"),
		"space in name":             append(base, "x a", "1"),
		"colon in regular name mid": append(base, "x:a", "1"),
	}
	h := dialH2Raw(t, p.addr)
	id := uint32(1)
	for name, fields := range cases {
		h.headers(id, true, fields...)
		status, _, rst, err := h.streamEnd(id)
		if err != nil {
			t.Fatalf("%s: connection failed: %v", name, err)
		}
		if rst != http2.ErrCodeProtocol {
			t.Errorf("%s: got status %q rst %v, want RST_STREAM PROTOCOL_ERROR", name, status, rst)
		}
		id += 2
	}
	if n := b.hits.Load(); n != 0 {
		t.Errorf("backend saw %d malformed requests", n)
	}
	// A body longer than its content-length is malformed too (RFC 9113 8.1.1): the stream is
	// reset (the request had started upstream; its upstream connection is closed mid-body).
	h.headers(id, false, append(base[:0:0], ":method", "POST", ":scheme", "http", ":path", "/x", ":authority", "a", "content-length", "3")...)
	h.fr.WriteData(id, true, []byte("12345"))
	if _, _, rst, err := h.streamEnd(id); err != nil || rst != http2.ErrCodeProtocol {
		t.Errorf("body over content-length: rst %v err %v, want PROTOCOL_ERROR", rst, err)
	}
	id += 2
	h.get(id, "/after")
	if status, body, rst, err := h.streamEnd(id); err != nil || status != "200" || !strings.Contains(string(body), "/after") {
		t.Fatalf("valid request after the malformed ones: %q %q rst %v err %v", status, body, rst, err)
	}

}

// Rapid reset (CVE-2023-44487): a client that opens and cancels streams faster than the
// limit loses the connection (GOAWAY ENHANCE_YOUR_CALM) long before it made the proxy start
// thousands of upstream requests.
func TestH2RapidResetFloodIsCut(t *testing.T) {
	b := startBackend(t, "b", nil)
	b.delay.Store(int64(50 * time.Millisecond))
	p := h2Proxy(t, oneRoute("", b.addr))
	h := dialH2Raw(t, p.addr)
	const streams = 5000
	sent := 0
	for id := uint32(1); sent < streams; id += 2 {
		if h.get(id, "/flood") != nil || h.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
			break // the proxy closed the connection
		}
		sent++
	}
	f, err := h.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if err != nil {
		t.Fatalf("no GOAWAY after %d rapid resets: %v", sent, err)
	}
	if code := f.(*http2.GoAwayFrame).ErrCode; code != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY code %v, want ENHANCE_YOUR_CALM", code)
	}
	t.Logf("%d streams opened and reset before the GOAWAY; the backend got %d", sent, b.hits.Load())
	if n := b.hits.Load(); n > 1000 {
		t.Errorf("the backend got %d of %d reset requests", n, streams)
	}
}

// A CONTINUATION flood (a header block that never ends) closes the connection instead of
// growing a buffer (CVE-2024-27316 and kin).
func TestH2ContinuationFloodIsCut(t *testing.T) {
	b := startBackend(t, "b", nil)
	p := h2Proxy(t, oneRoute("", b.addr))
	h := dialH2Raw(t, p.addr)
	h.hbuf.Reset()
	h.enc.WriteField(hpack.HeaderField{Name: ":method", Value: "GET"})
	h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.hbuf.Bytes()})
	h.continuationFlood(t, 500, 2000, "an endless header block")
}

// continuationFlood sends up to frames CONTINUATION frames of fields x-a: 0123456789 (each
// fragment holds per of them) on stream 1, whose block never ends, and wants the connection
// closed with GOAWAY ENHANCE_YOUR_CALM.
func (h *h2raw) continuationFlood(t *testing.T, per, frames int, what string) {
	t.Helper()
	frag := bytes.Repeat([]byte{0x40, 3, 'x', '-', 'a', 10, '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}, per)
	var werr error
	for i := 0; i < frames && werr == nil; i++ {
		werr = h.fr.WriteContinuation(1, false, frag)
	}
	f, err := h.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if err != nil {
		t.Fatalf("no GOAWAY for %s (write: %v): %v", what, werr, err)
	}
	if code := f.(*http2.GoAwayFrame).ErrCode; code != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY code %v, want ENHANCE_YOUR_CALM", code)
	}
}

// A client that never opens its flow-control window gets no more than the window allows;
// the stream is reset at the route's total timeout, the upstream connection is released, and
// the connection goes on serving other streams meanwhile.
func TestH2ClientThatNeverOpensItsWindow(t *testing.T) {
	big := bytes.Repeat([]byte("w"), 1<<20)
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/small" {
			w.WriteHeader(204)
			return
		}
		w.Write(big)
	}))
	p := h2Proxy(t, strings.Replace(oneRoute("", b.addr), "routes: [{name: r, pool: p}]", "routes: [{name: r, pool: p, timeout: 1s}]", 1))
	h := dialH2Raw(t, p.addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1000})
	h.get(1, "/big")
	// Another stream while the first is stuck: HEADERS are not flow controlled.
	h.get(3, "/small")
	got := 0
	var rst http2.ErrCode
	start := time.Now()
	small := false
	for rst == 0 {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection failed: %v", err)
		}
		switch f := f.(type) {
		case *http2.DataFrame:
			if f.StreamID == 1 {
				got += len(f.Data())
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 3 && f.PseudoValue("status") == "204" {
				small = true
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				rst = f.ErrCode
			}
		}
	}
	if got > 1000 {
		t.Errorf("received %d bytes on a window of 1000", got)
	}
	if el := time.Since(start); el < 800*time.Millisecond || el > 10*time.Second {
		t.Errorf("stream reset after %v, want about the 1 s total timeout", el)
	}
	if !small {
		t.Errorf("the other stream was not answered while the first was stuck")
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		return gaugeValue(p.s.metrics.inFlight) == 0
	}, "the upstream request was not released")
}

// Graceful shutdown: GOAWAY names the last stream taken; streams in flight finish with their
// whole responses, and the connection then closes.
func TestH2GracefulShutdownFinishesInFlightStreams(t *testing.T) {
	b := startBackend(t, "b", nil)
	b.delay.Store(int64(300 * time.Millisecond))
	p := h2Proxy(t, oneRoute("", b.addr))
	h := dialH2Raw(t, p.addr)
	for id := uint32(1); id <= 9; id += 2 {
		h.get(id, fmt.Sprintf("/s%d", id))
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return b.hits.Load() == 5 }, "the 5 requests did not reach the backend")
	done := make(chan error, 1)
	go func() { done <- p.s.Shutdown(t.Context()) }()
	var away *http2.GoAwayFrame
	ended := map[uint32]bool{}
	for len(ended) < 5 {
		f, err := h.fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended with %d of 5 streams answered: %v", len(ended), err)
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			away = f
		case *http2.DataFrame:
			if f.StreamEnded() {
				ended[f.StreamID] = true
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				ended[f.StreamID] = true
			}
		case *http2.RSTStreamFrame:
			t.Fatalf("stream %d reset (%v) during a graceful shutdown", f.StreamID, f.ErrCode)
		}
	}
	if away == nil || away.ErrCode != http2.ErrCodeNo || away.LastStreamID < 9 {
		t.Fatalf("GOAWAY %+v before the streams ended, want NO_ERROR with last stream 9", away)
	}
	if _, err := h.fr.ReadFrame(); err == nil {
		t.Errorf("the connection stayed open after its last stream")
	} else if !errors.Is(err, io.EOF) && !isReset(err) {
		t.Logf("connection ended with %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("shutdown did not return")
	}
}

func isReset(err error) bool { return strings.Contains(err.Error(), "reset") }

// gaugeValue reads a Prometheus gauge.
func gaugeValue(g interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	_ = g.Write(&m)
	return m.GetGauge().GetValue()
}

// An HTTP/2 connection without streams for the idle timeout is closed with GOAWAY NO_ERROR,
// and every connection is counted back (max_connections).
func TestH2IdleConnectionGoesAway(t *testing.T) {
	b := startBackend(t, "b", nil)
	p := h2Proxy(t, oneRoute("", b.addr)+"timeouts: {idle: 300ms}\n")
	h := dialH2Raw(t, p.addr)
	h.get(1, "/x")
	if status, _, _, err := h.streamEnd(1); err != nil || status != "200" {
		t.Fatalf("request: %q %v", status, err)
	}
	start := time.Now()
	f, err := h.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok })
	if err != nil {
		t.Fatalf("no GOAWAY on an idle connection: %v", err)
	}
	if ga := f.(*http2.GoAwayFrame); ga.ErrCode != http2.ErrCodeNo || ga.LastStreamID != 1 {
		t.Errorf("GOAWAY %v last %d, want NO_ERROR last 1", ga.ErrCode, ga.LastStreamID)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("GOAWAY after %v idle, want about 300ms", el)
	}
	if _, err := h.fr.ReadFrame(); err == nil {
		t.Errorf("connection still open after GOAWAY")
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return p.s.conns.Clients() == 0 }, "client connections were not counted back")
}
