package fastpath

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
)

// The fast path's own answer to every request it can read but not answer from a fresh memory
// hit: misses, revalidations, stale entries, ranges, preconditions, request cache directives,
// disk-only bodies, Vary mismatches, pass-through URLs and the RTT endpoint. Lending such a
// request to net/http (lend.go) cost a net/http connection state and goroutine per request
// and several goroutine hops, and a miss took about 4 ms against Varnish's 2.6 ms. Here the
// connection's own goroutine builds the *http.Request net/http would have built from the head
// already parsed, runs the one cache path (Cache.ServeHTTP: the fill and collapse machinery, the
// RFC 9111 rules, stale-if-error, the forwarding fields, request_headers, tiering) and the
// response goes straight to the client connection through fastWriter, which frames it exactly as
// net/http's server does (chunked or with a length, Date, a sniffed Content-Type, Connection:
// close, interim 1xx).

// fastChunkingSize is net/http's bufferBeforeChunkingSize: a response without a Content-Length
// whose handler finishes within this many bytes (and never flushes) gets a Content-Length;
// otherwise it is sent chunked.
const fastChunkingSize = 2048

// fastWriteBatch is how much of a response the writer gathers before it writes to the socket.
const fastWriteBatch = 64 << 10

// ownable reports whether the fast path may answer the parsed request (GET or HEAD over HTTP/1.1
// without a body) through the cache's full path itself. What it refuses (and lendable accepts) is lent to net/http, whose reading of
// these odd shapes is the reference: a target that is not in origin form (absolute form, "*") or
// does not parse, no Host or several, a Host value that is not plain (h1.PlainHost), several
// Connection fields (net/http reads only the first). Bodies, Expect, Upgrade and HTTP/1.0 are not
// lendable either: they are handed over for good.
func (fc *fastConn) ownable() bool {
	h := &fc.head
	if h.ContentLength > 0 || h.Chunked || h.TransferEncoding != nil || h.Upgrade {
		return false
	}
	line := h.Line
	if !bytes.HasPrefix(line, []byte("GET ")) && !bytes.HasPrefix(line, []byte("HEAD ")) {
		return false // other methods go to net/http with the rest of the connection
	}
	sp := bytes.IndexByte(line, ' ')
	if !bytes.HasSuffix(line, []byte(" HTTP/1.1")) || sp+1 > len(line)-len(" HTTP/1.1") {
		return false
	}
	target := line[sp+1 : len(line)-len(" HTTP/1.1")]
	if len(target) == 0 || target[0] != '/' {
		return false
	}
	hosts, conns := 0, 0
	for _, f := range fc.head.Fields {
		if h1.HasCTL(f.Value) {
			return false
		}
		switch {
		case bytes.EqualFold(f.Name, []byte("Host")):
			hosts++
			if !h1.PlainHost(f.Value) {
				return false
			}
		case bytes.EqualFold(f.Name, []byte("Connection")):
			conns++
		case bytes.EqualFold(f.Name, []byte("Expect")):
			return false
		}
	}
	return hosts == 1 && conns <= 1
}

// request builds the request net/http's server would pass to its handler for the parsed head:
// canonical field names, Host moved out of the header, Pragma: no-cache read as Cache-Control:
// no-cache (net/http's fixPragmaCacheControl), the peer address and no body. ok is false when
// the target does not parse, as net/http would refuse it.
func (fc *fastConn) request(ctx context.Context) (*http.Request, bool) {
	line := fc.head.Line
	sp := bytes.IndexByte(line, ' ')
	method := string(line[:sp])
	target := string(line[sp+1 : len(line)-len(" HTTP/1.1")])
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, false
	}
	h := make(http.Header, len(fc.head.Fields))
	var host string
	for _, f := range fc.head.Fields {
		k := http.CanonicalHeaderKey(string(f.Name))
		if k == "Host" {
			host = string(f.Value)
			continue
		}
		h[k] = append(h[k], string(f.Value))
	}
	if hp, ok := h["Pragma"]; ok && len(hp) > 0 && hp[0] == "no-cache" {
		if _, cc := h["Cache-Control"]; !cc {
			h["Cache-Control"] = []string{"no-cache"}
		}
	}
	r := &http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Host: host, RequestURI: target, RemoteAddr: fc.c.RemoteAddr().String(),
		Body: http.NoBody, Close: h1.HasToken([]byte(h.Get("Connection")), "close"), TLS: fc.tls,
	}
	return r.WithContext(ctx), true
}

// serveOwn answers the request whose head (end bytes) is buffered through Cache.ServeHTTP, writing
// the response on the connection, and reports whether the connection may serve another request.
// It returns ok false, with nothing consumed or written, when net/http is to answer it instead.
func (fc *fastConn) serveOwn(end int) (keep, ok bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // ends a pass-through fetch the response no longer needs, as net/http does
	r, ok := fc.request(ctx)
	if !ok {
		return false, false
	}
	fc.in.Consume(end)
	fc.fs.cache.ServedOwn()
	w := fastWriter{fc: fc, req: r, head: r.Method == http.MethodHead, header: make(http.Header), clen: -1,
		out: fc.out[:0], pend: fc.pend[:0]}
	if d := fc.fs.cfg.ClientTimeout; d > 0 {
		// net/http's write timeout runs from the request head to the end of its response.
		fc.wdeadline = time.Now().Add(d)
		_ = fc.c.SetWriteDeadline(fc.wdeadline)
	}
	defer func() {
		if p := recover(); p != nil {
			// A handler that panics aborts the response (http.ErrAbortHandler: a body cut
			// short); the connection is closed without completing it, as net/http does.
			if p != http.ErrAbortHandler {
				fc.fs.cfg.Log.Error("edge: panic serving a request", "panic", p)
			}
			keep, ok = false, true
			fc.closing = false
		}
		fc.out, fc.pend = w.out[:0], w.pend[:0]
	}()
	fc.fs.cache.ServeHTTP(&w, r)
	keep = w.finish()
	fc.closing = w.closeAfter && w.err == nil
	return keep, true
}

// fastWriter is the http.ResponseWriter of a request the fast path answers through
// Cache.ServeHTTP. It follows net/http's server (chunkWriter.writeHeader) in every choice a client
// can see: the header fields sorted (http.Header.WriteSubset) followed by Date, Content-Length,
// Content-Type, Connection and Transfer-Encoding when net/http adds them; a Content-Length for a
// handler that ends within fastChunkingSize bytes without flushing, chunked framing otherwise;
// 1xx responses written at once; a response cut short (fewer bytes than its Content-Length, a
// panic) closes the connection. The handler must not change the header after WriteHeader (the
// edge's handlers only read it then).
type fastWriter struct {
	fc     *fastConn
	req    *http.Request
	head   bool // HEAD: the body is counted, never sent
	header http.Header

	status      int   // 0 until WriteHeader
	clen        int64 // the declared Content-Length, or -1
	written     int64 // body bytes the handler wrote
	sent        bool  // the head is in out (or on the wire)
	chunking    bool
	closeAfter  bool
	pend        []byte // body bytes before the head is decided (at most fastChunkingSize)
	out         []byte // bytes for the socket not yet written
	err         error  // the first write error: every later write fails with it
	handlerDone bool
}

// Header returns the response header map.
func (w *fastWriter) Header() http.Header { return w.header }

// WriteHeader records the final status, or writes an interim (1xx) response at once.
func (w *fastWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.interim(code)
		return
	}
	w.status = code
	if cl := w.header.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.clen = v
		} else {
			w.header.Del("Content-Length")
		}
	}
}

// interim writes a 1xx response with the current header (net/http keeps the map; the caller
// clears it, see interimForwarder). It runs on the transport's goroutine while the handler waits
// for the final response, so it writes from a buffer of its own.
func (w *fastWriter) interim(code int) {
	if w.err != nil {
		return
	}
	b := appendStatusLine(nil, code)
	aw := appendWriter{b}
	_ = w.header.WriteSubset(&aw, excludedNoBody)
	b = append(aw.b, "\r\n"...)
	if _, err := w.fc.c.Write(b); err != nil {
		w.err = err
	}
}

var (
	excludedNoBody = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}
	excluded304    = map[string]bool{"Content-Type": true, "Content-Length": true, "Transfer-Encoding": true}
)

// Write adds body bytes to the response.
func (w *fastWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.clen != -1 && w.written > w.clen {
		return 0, http.ErrContentLength
	}
	if w.err != nil {
		return 0, w.err
	}
	if !w.sent {
		if len(w.pend)+len(p) <= fastChunkingSize {
			w.pend = append(w.pend, p...)
			return len(p), nil
		}
		w.sendHead()
	}
	w.body(p)
	if len(w.out) >= fastWriteBatch {
		w.flushOut()
	}
	return len(p), w.err
}

// Flush sends what the response holds so far (a streamed miss flushes as its body arrives).
func (w *fastWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		w.sendHead()
	}
	w.flushOut()
}

// finish completes the response after the handler returned and reports whether the connection
// may serve another request.
func (w *fastWriter) finish() bool {
	w.handlerDone = true
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		w.sendHead()
	}
	if w.chunking && !w.head {
		w.out = append(w.out, "0\r\n\r\n"...)
	}
	w.flushOut()
	short := !w.head && w.clen != -1 && bodyAllowed(w.status) && w.clen != w.written
	return w.err == nil && !w.closeAfter && !short
}

// sendHead decides the framing, renders the head into out and moves the pending body after it.
// The rules are net/http's chunkWriter.writeHeader for an HTTP/1.1 request with keep-alives on.
func (w *fastWriter) sendHead() {
	w.sent = true
	h, p := w.header, w.pend
	var exclude map[string]bool
	del := func(k string) {
		if _, ok := h[k]; ok {
			if exclude == nil {
				exclude = map[string]bool{}
			}
			exclude[k] = true
		}
	}
	te := h.Get("Transfer-Encoding")
	hasTE := te != ""
	var setCL, ctype, conn, setTE string
	if _, has := h["Content-Length"]; w.handlerDone && !hasTE && bodyAllowed(w.status) && !has && (!w.head || len(p) > 0) {
		w.clen = int64(len(p))
		setCL = strconv.Itoa(len(p))
	}
	w.closeAfter = w.req.Close || h.Get("Connection") == "close"
	if bodyAllowed(w.status) {
		_, haveType := h["Content-Type"]
		if h.Get("Content-Encoding") == "" && !haveType && !hasTE && len(p) > 0 {
			ctype = http.DetectContentType(p)
		}
	} else {
		ex := excludedNoBody
		if w.status == http.StatusNotModified {
			ex = excluded304
		}
		for k := range ex {
			del(k)
		}
	}
	_, hasDate := h["Date"]
	hasCL := w.clen != -1
	if hasCL && hasTE && te != "identity" {
		del("Content-Length")
		hasCL = false
	}
	switch {
	case w.head || !bodyAllowed(w.status):
		del("Transfer-Encoding")
	case hasCL:
		del("Transfer-Encoding")
	case te == "identity":
		w.closeAfter = true
		del("Transfer-Encoding")
	default:
		w.chunking, setTE = true, "chunked"
		if te == "chunked" {
			del("Transfer-Encoding")
		}
	}
	if w.chunking {
		del("Content-Length")
	}
	if w.closeAfter && !h1.HasToken([]byte(h.Get("Connection")), "close") {
		del("Connection")
		conn = "close"
	}
	out := appendStatusLine(w.out, w.status)
	aw := appendWriter{out}
	_ = h.WriteSubset(&aw, exclude)
	out = aw.b
	if !hasDate {
		out = append(out, "Date: "...)
		out = time.Now().UTC().AppendFormat(out, http.TimeFormat)
		out = append(out, "\r\n"...)
	}
	for _, kv := range [...][2]string{{"Content-Length", setCL}, {"Content-Type", ctype}, {"Connection", conn}, {"Transfer-Encoding", setTE}} {
		if kv[1] != "" {
			out = append(append(append(append(out, kv[0]...), ": "...), kv[1]...), "\r\n"...)
		}
	}
	w.out = append(out, "\r\n"...)
	if len(p) > 0 {
		w.body(p)
	}
}

// body appends body bytes to out, framed as a chunk when chunking; a HEAD's body is dropped.
// A large piece is written at once with the bytes before it (one writev, no copy).
func (w *fastWriter) body(p []byte) {
	if w.head || w.err != nil {
		return
	}
	if w.chunking {
		w.out = strconv.AppendInt(w.out, int64(len(p)), 16)
		w.out = append(w.out, "\r\n"...)
	}
	if len(p) >= fastCopyBody {
		bufs := net.Buffers{w.out, p}
		if w.chunking {
			bufs = append(bufs, []byte("\r\n"))
		}
		w.writeBufs(bufs)
		return
	}
	w.out = append(w.out, p...)
	if w.chunking {
		w.out = append(w.out, "\r\n"...)
	}
}

// flushOut writes out to the connection.
func (w *fastWriter) flushOut() {
	if len(w.out) == 0 || w.err != nil {
		w.out = w.out[:0]
		return
	}
	w.writeBufs(net.Buffers{w.out})
}

// writeBufs writes bufs (out first) with one writev and empties out; a write that hits the
// client timeout makes the connection's close a reset (Config.Cut).
func (w *fastWriter) writeBufs(bufs net.Buffers) {
	out := w.out
	var err error
	if len(bufs) == 1 {
		_, err = w.fc.c.Write(out)
	} else {
		_, err = bufs.WriteTo(w.fc.fs.cfg.Raw(w.fc.c))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		w.fc.fs.cfg.Cut(w.fc.fs.cfg.Raw(w.fc.c))
	}
	if err != nil && w.err == nil {
		w.err = err
	}
	w.out = out[:0]
}

// bodyAllowed is net/http's bodyAllowedForStatus.
func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199) && status != http.StatusNoContent && status != http.StatusNotModified
}

// appendStatusLine appends net/http's HTTP/1.1 status line for code.
func appendStatusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	if text := http.StatusText(code); text != "" {
		b = strconv.AppendInt(b, int64(code), 10)
		b = append(b, ' ')
		b = append(b, text...)
		return append(b, "\r\n"...)
	}
	b = append(b, strconv.Itoa(code)...) // net/http writes "%03d status code %d"
	b = append(b, " status code "...)
	b = strconv.AppendInt(b, int64(code), 10)
	return append(b, "\r\n"...)
}

// appendWriter is an io.Writer (and io.StringWriter, which http.Header.WriteSubset prefers) that
// appends to a byte slice.
type appendWriter struct{ b []byte }

func (a *appendWriter) Write(p []byte) (int, error) { a.b = append(a.b, p...); return len(p), nil }

func (a *appendWriter) WriteString(s string) (int, error) {
	a.b = append(a.b, s...)
	return len(s), nil
}
