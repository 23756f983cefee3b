package l7

import (
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/h2"
	"github.com/switchyard/switchyard/internal/tlsconf"
	"github.com/switchyard/switchyard/l7/core"
)

// The HTTP/2 engine: package h2 runs the connection (frames, flow control, streams) and
// hands each request stream to serveStream here, on a goroutine of its own. A stream is served
// by the goroutine engine's own exchange (goConn.handle: route, admit, pick, rewrite, forward,
// release, observe, retries, timeouts), so every rule of the core holds on HTTP/2 by
// construction, on the same pooled upstream connections. No HTTP/1.1 text stands between: the
// request head is filled from the stream's fields (streamConn.request), its body read from DATA
// (chunked by the core when it has no length), and the response goes out as HEADERS, DATA and
// trailer frames built from the upstream's parsed head (goConn.sendStart, sendBody). What the
// core hands to net/http (no route, sticky pools, extended CONNECT, odd requests)
// goes to the same net/http handler with an http.ResponseWriter on the stream (h2fallback.go).

// h2Conn is one client HTTP/2 connection.
type h2Conn struct {
	s      *Server
	scheme string
	raddr  net.Addr
	laddr  net.Addr
	tls    *tls.ConnectionState
	conn   *h2.Conn
	altSvc []byte // the Alt-Svc line of the listener's HTTP/3, or nil
	// certHeader is the listener's client-subject field (client_auth), or nil
	certHeader []byte

	mu   sync.Mutex
	free []*h2Req // per-stream request state, reused
}

// h2Req is the request state of one stream: a goroutine-engine connection over streamConn.
type h2Req struct {
	gc *goConn
	sc *streamConn
}

// serveH2 serves an HTTP/2 connection (after ALPN h2, or the h2c preface) until it ends. The
// caller counted it against max_connections and releases it afterwards.
func (s *Server) serveH2(nc net.Conn, scheme string, ts *tls.ConnectionState, altSvc, certHeader []byte) {
	cfg := s.state.Load().cfg
	hc := &h2Conn{s: s, scheme: scheme, raddr: nc.RemoteAddr(), laddr: nc.LocalAddr(), tls: ts, altSvc: altSvc, certHeader: certHeader}
	hc.conn = h2.NewConn(nc, h2.Config{
		MaxHeaderBytes:  cfg.Limits.MaxHeaderBytes,
		IdleTimeout:     cfg.Timeouts.Idle,
		PrefaceTimeout:  cfg.Timeouts.ReadHeader,
		WriteTimeout:    cfg.Timeouts.Total,
		ExtendedConnect: true, // WebSocket over HTTP/2 (RFC 8441), to HTTP/1.1 pools by Upgrade
		OnMalformed: func(reason string) {
			s.onReject(hc.raddr, &h1.Rejection{Status: 400, Reason: "malformed HTTP/2 request: " + reason})
		},
	}, hc.serveStream)
	s.mu.Lock()
	if s.hard.Load() {
		s.mu.Unlock()
		nc.Close()
		return
	}
	s.h2conns[hc.conn] = struct{}{}
	s.mu.Unlock()
	hc.conn.Serve()
	s.mu.Lock()
	delete(s.h2conns, hc.conn)
	s.mu.Unlock()
}

// closeH2 starts a graceful close (GOAWAY) of every HTTP/2 connection, or cuts them all; it
// returns how many are still open.
func (s *Server) closeH2(all bool) int {
	s.mu.Lock()
	list := make([]*h2.Conn, 0, len(s.h2conns))
	for c := range s.h2conns {
		list = append(list, c)
	}
	s.mu.Unlock()
	for _, c := range list {
		if all {
			c.Close()
		} else {
			c.Shutdown()
		}
	}
	return len(list)
}

// h2cOn reports whether the listener behind fb serves h2c.
func (s *Server) h2cOn(fb *h1.Handover) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.noH2C[fb]
}

// h2cConn is a plain connection whose first bytes were read already; CloseWrite lets the h2
// connection half-close after its last GOAWAY.
type h2cConn struct{ h1.PrefixConn }

// CloseWrite shuts the sending side of the TCP connection.
func (c *h2cConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("close write: not supported by the connection")
}

func (hc *h2Conn) get() *h2Req {
	hc.mu.Lock()
	if n := len(hc.free); n > 0 {
		r := hc.free[n-1]
		hc.free = hc.free[:n-1]
		hc.mu.Unlock()
		return r
	}
	hc.mu.Unlock()
	sc := &streamConn{hc: hc}
	gc := &goConn{clientConn: newClientConn(hc.s, sc, hc.raddr, hc.scheme, nil), c: sc, engine: engineH2}
	gc.altSvc = hc.altSvc
	if gc.certHeader = hc.certHeader; gc.certHeader != nil {
		gc.certSubject = []byte(tlsconf.ClientSubject(hc.tls))
	}
	gc.proto = "HTTP/2.0"
	gc.in.Buf = make([]byte, 4<<10)
	return &h2Req{gc: gc, sc: sc}
}

func (hc *h2Conn) put(r *h2Req) {
	r.sc.st, r.gc.stream = nil, nil
	hc.mu.Lock()
	if len(hc.free) < 64 {
		hc.free = append(hc.free, r)
	}
	hc.mu.Unlock()
}

// inlineBody is the largest request body put into the request's buffer with its head, so the
// core sends head and body in one write and may replay them on a retry.
const inlineBody = 64 << 10

// serveStream serves one request stream through the core.
func (hc *h2Conn) serveStream(st *h2.Stream) {
	r := hc.get()
	defer hc.put(r)
	gc, sc := r.gc, r.sc
	sc.reset(st)
	gc.stream = st
	gc.in = h1.Reader{Conn: sc, Buf: gc.in.Buf}
	gc.clientClose = false
	state := hc.s.state.Load()
	switch {
	case st.TooLarge:
		gc.refuse(errHeadTooLong)
		return
	case st.Method == "CONNECT" && st.Protocol != "":
		// Extended CONNECT (WebSocket over HTTP/2): net/http's upgrade path, as HTTP/1.1
		// upgrades take, with the stream as the upgraded connection (h2.ServeHandler).
		hc.fallback(st, nil)
		return
	case st.Method == "CONNECT":
		gc.writeError(405, "CONNECT is not supported over HTTP/2 here", nil, false)
		return
	}
	gc.in.Buf = sc.request(&gc.head, gc.in.Buf[:0])
	gc.in.R, gc.in.W = 0, len(gc.in.Buf)
	gc.in.Buf = gc.in.Buf[:cap(gc.in.Buf)]
	if _, fallback := gc.handle(state, 0); fallback {
		hc.fallback(st, gc.in.Buffered())
	}
}

// streamConn is one stream as the goroutine engine's connection: Read gives the request body
// (DATA as it arrives), deadlines bound the stream; the response goes out as frames.
type streamConn struct {
	hc    *h2Conn
	st    *h2.Stream
	head  []byte   // the bytes the request head's slices point into
	spans [][3]int // where each field's name and value are in head
}

func (sc *streamConn) reset(st *h2.Stream) { sc.st = st }

// request fills h with the stream's request as the core reads a request head, with no
// HTTP/1.1 text in between: the request line from :method and :path, Host from :authority,
// the fields (checked by package h2: no CR, LF or connection-specific field reaches here), and
// the framing of the body: the length of a body received whole, the content-length, or
// chunked for a body still arriving without one or ended by trailers (goConn.requestBody
// frames it; trailers after a content-length are dropped, as HTTP/1.1 would have to). A body
// received whole of at most inlineBody bytes is appended to body, so the core sends head and
// body in one write and may replay them on a retry; it returns body.
func (sc *streamConn) request(h *h1.Head, body []byte) []byte {
	st := sc.st
	b := append(append(append(sc.head[:0], st.Method...), ' '), st.Path...)
	b = append(b, " HTTP/1.1"...)
	line := len(b)
	spans := sc.spans[:0]
	field := func(name, value string) {
		n := len(b)
		b = append(b, name...)
		spans = append(spans, [3]int{n, len(b), len(b) + len(value)})
		b = append(b, value...)
	}
	if st.Authority != "" {
		field("host", st.Authority)
	}
	for _, f := range st.Fields {
		if f.Name != "content-length" && (f.Name != "host" || st.Authority == "") {
			field(f.Name, f.Value)
		}
	}
	h.Line, h.Fields = b[:line], h.Fields[:0]
	for _, sp := range spans {
		h.Fields = append(h.Fields, h1.Field{Name: b[sp[0]:sp[1]], Value: b[sp[1]:sp[2]]})
	}
	sc.head, sc.spans = b, spans
	h.ContentLength, h.Chunked, h.TransferEncoding, h.Upgrade = -1, false, nil, false
	n, whole := st.Received()
	switch {
	case whole && len(st.RequestTrailers()) > 0:
		// Received whole with trailers: framed as a body of unknown length, so they follow it.
		h.Chunked, h.TransferEncoding = true, chunkedCoding
	case whole && (n > 0 || st.ContentLength >= 0):
		h.ContentLength = int64(n)
	case whole:
	case st.ContentLength >= 0 && !announcesTrailers(st.Fields):
		h.ContentLength = st.ContentLength
	default:
		// No length, or trailers announced (a Trailer field) after one: framed as a body of
		// unknown length, so that trailers can follow it to an HTTP/1.1 pool too.
		h.Chunked, h.TransferEncoding = true, chunkedCoding
	}
	if whole && n > 0 && n <= inlineBody {
		body = readFull(st, body, n)
	}
	return body
}

var chunkedCoding = []byte("chunked")

// announcesTrailers reports a request that names the trailer fields it will send (RFC 9110
// 6.6.2).
func announcesTrailers(fields []h2.Field) bool {
	for _, f := range fields {
		if f.Name == "trailer" {
			return true
		}
	}
	return false
}

// readFull appends n buffered body bytes of st to b.
func readFull(st *h2.Stream, b []byte, n int) []byte {
	b = append(b, make([]byte, n)...)
	off := len(b) - n
	for off < len(b) {
		k, err := st.Read(b[off:])
		off += k
		if err != nil {
			return b[:off]
		}
	}
	return b
}

// Read gives the core the request body.
func (sc *streamConn) Read(p []byte) (int, error) { return sc.st.Read(p) }

// Write refuses bytes: a stream's response goes out as frames (clientConn.h2ResponseHead,
// goConn.sendStart and sendBody), never as HTTP/1.1 text.
func (sc *streamConn) Write([]byte) (int, error) {
	return 0, errors.New("write HTTP/1.1 bytes to an HTTP/2 stream: send frames")
}

// Close is a no-op: the stream ends when its handler returns.
func (sc *streamConn) Close() error { return nil }

// LocalAddr implements net.Conn.
func (sc *streamConn) LocalAddr() net.Addr { return sc.hc.laddr }

// RemoteAddr implements net.Conn.
func (sc *streamConn) RemoteAddr() net.Addr { return sc.hc.raddr }

// SetDeadline bounds the stream's body reads and flow-controlled writes.
func (sc *streamConn) SetDeadline(t time.Time) error { sc.st.SetDeadline(t); return nil }

// SetReadDeadline is SetDeadline (a stream has one deadline).
func (sc *streamConn) SetReadDeadline(t time.Time) error { sc.st.SetDeadline(t); return nil }

// SetWriteDeadline is SetDeadline (a stream has one deadline).
func (sc *streamConn) SetWriteDeadline(t time.Time) error { sc.st.SetDeadline(t); return nil }

// h2ResponseHead builds in cc.block the header block of the response whose head is in
// cc.rhead: its fields minus hop-by-hop and connection-specific ones, then Via, and the
// failover and Alt-Svc fields, as core.ResponseHead builds them for HTTP/1.1.
func (cc *clientConn) h2ResponseHead(code int) []byte {
	b := h2.AppendStatus(cc.block[:0], code)
	for _, f := range cc.rhead.Fields {
		if core.ForwardResponseField(f.Name, cc.tokens) && h2.ResponseField(f.Name) && cc.responseHeaders.Keep(f.Name) {
			b = h2.AppendField(b, f.Name, f.Value)
		}
	}
	for _, f := range cc.responseHeaders.Fields() {
		b = h2.AppendField(b, f.Name, f.Value)
	}
	if len(cc.rhead.Line) > 7 {
		via := append(append(cc.out[:0], "1."...), cc.rhead.Line[7])
		b = h2.AppendField(b, hVia, append(via, " switchyard"...))
	}
	b = appendLines(appendLines(b, cc.failover), cc.altSvc)
	cc.block = b
	return b
}

// h2Error answers the stream's request with a proxy-made plain-text response, what
// core.ErrorResponse writes on HTTP/1.1; extra holds header lines, each ending in CRLF. A gRPC
// call gets gRPC's trailers-only form instead: HTTP 200 with the grpc-status that stands for
// the failure (core.GRPCStatus), which is all a gRPC client reads.
func (cc *clientConn) h2Error(code int, msg string, extra []byte) error {
	if cc.grpc {
		b := h2.AppendStatus(cc.block[:0], http.StatusOK)
		b = h2.AppendField(b, hContentType, grpcType)
		b = h2.AppendField(b, hGRPCStatus, strconv.AppendInt(cc.out[:0], int64(grpcStatusOf(code, extra)), 10))
		b = h2.AppendField(b, hGRPCMessage, []byte(core.GRPCMessage(msg)))
		cc.block = b
		return cc.stream.Respond(b, nil, true)
	}
	b := h2.AppendStatus(cc.block[:0], code)
	b = h2.AppendField(b, hContentType, textPlain)
	b = h2.AppendField(b, hNoSniff, nosniff)
	b = appendLines(b, extra)
	b = h2.AppendField(b, hContentLength, strconv.AppendInt(cc.out[:0], int64(len(msg)+1), 10))
	cc.block = b
	cc.out = append(append(cc.out[:0], msg...), '\n')
	return cc.stream.Respond(b, cc.out, true)
}

// grpcStatusOf is the gRPC status of a failure the proxy answers with code (and extra header
// lines, which mark deliberate shedding).
func grpcStatusOf(code int, extra []byte) int {
	shed := code == http.StatusTooManyRequests || bytes.Contains(extra, []byte("X-Load-Shed"))
	return core.GRPCStatus(code, shed)
}

// h2Trailers builds in cc.block the trailer block of fields (an HTTP/1.1 upstream's chunked
// trailers, already screened by h1.Chunked.Trailers).
func (cc *clientConn) h2Trailers(fields []h1.Field) []byte {
	b := cc.block[:0]
	for _, f := range fields {
		b = h2.AppendField(b, f.Name, f.Value)
	}
	cc.block = b
	return b
}

// appendLines appends header lines ("Name: value" CRLF each, as the core builds them) to an
// HTTP/2 header block.
func appendLines(b, lines []byte) []byte {
	core.EachLine(lines, func(name, value []byte) { b = h2.AppendField(b, name, value) })
	return b
}

var (
	hVia           = []byte("via")
	hContentType   = []byte("content-type")
	hNoSniff       = []byte("x-content-type-options")
	hContentLength = []byte("content-length")
	textPlain      = []byte("text/plain; charset=utf-8")
	grpcType       = []byte("application/grpc")
	hGRPCStatus    = []byte("grpc-status")
	hGRPCMessage   = []byte("grpc-message")
	nosniff        = []byte("nosniff")
)
