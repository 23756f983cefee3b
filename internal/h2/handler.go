package h2

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http2"
)

// HandlerOptions is what ServeHandler tells the handler of the connection a stream is on.
type HandlerOptions struct {
	// RemoteAddr is the client's address (http.Request.RemoteAddr).
	RemoteAddr string
	// TLS is the connection's TLS state, nil for h2c.
	TLS *tls.ConnectionState
	// Context is the base of the request's context (values for the handler); nil: Background.
	Context context.Context
	// Prefix is request body already read from the stream, served before the rest.
	Prefix []byte
}

// ServeHandler serves an http.Handler on a stream, the way net/http's own HTTP/2 server would:
// the stream's request as an *http.Request (its body the stream's DATA, its context cancelled
// when the client resets the stream), the response through an http.ResponseWriter that holds
// the head until the body starts, ends the stream with the trailers the handler set, and resets
// the stream when the handler aborts (panics with http.ErrAbortHandler). Both HTTP stops serve
// HTTP/2 with it: L7 for what its request core does not take, the edge for every request its
// fast path does not answer (edge/fastpath/h2hit.go).
func ServeHandler(st *Stream, h http.Handler, o HandlerOptions) {
	// Sized for a cached response's ten or so fields: a map grown past eight rehashed each one.
	w := &responseWriter{st: st, hdr: make(http.Header, respFields), tunnel: st.Protocol != "", raddr: o.RemoteAddr}
	if st.TooLarge {
		http.Error(w, "request header fields too large", http.StatusRequestHeaderFieldsTooLarge)
		w.finish()
		return
	}
	r, ok := request(st, o)
	if !ok {
		http.Error(w, "bad request target", http.StatusBadRequest)
		w.finish()
		return
	}
	base := o.Context
	if base == nil {
		base = context.Background()
	}
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	// The client reset the stream: stop what the handler started. OnReset, not a goroutine
	// waiting on Done: that cost a goroutine and a channel per stream, and kept the stream
	// from being reused.
	st.OnReset(cancel)
	defer st.OnReset(nil)
	if serve(h, w, r.WithContext(ctx)) {
		w.finish()
		return
	}
	st.Reset(http2.ErrCodeInternal) // the response was cut: never end it as if whole
}

// request builds the stream's *http.Request; false when its target is not a path.
func request(st *Stream, o HandlerOptions) (*http.Request, bool) {
	u, err := url.ParseRequestURI(st.Path)
	if err != nil || st.Path == "*" {
		return nil, false
	}
	hdr := make(http.Header, len(st.Fields))
	host := st.Authority
	for _, f := range st.Fields {
		if f.Name == "host" {
			if host == "" {
				host = f.Value
			}
			continue
		}
		hdr.Add(f.Name, f.Value)
	}
	r := &http.Request{Method: st.Method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: hdr,
		Host: host, RemoteAddr: o.RemoteAddr, RequestURI: st.Path, TLS: o.TLS, ContentLength: st.ContentLength}
	if st.Protocol != "" {
		upgradeRequest(r, st.Protocol)
		return r, true
	}
	n, whole := st.Received()
	switch {
	case whole && n == 0 && len(o.Prefix) == 0:
		r.Body, r.ContentLength = http.NoBody, 0
	case whole:
		r.ContentLength = int64(len(o.Prefix) + n)
		fallthrough
	default:
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(o.Prefix), st))
	}
	return r, true
}

// respFields is the room a response head's field map starts with.
const respFields = 16

// serve runs the handler and reports whether the response may end normally: false
// when the handler aborted it (http.ErrAbortHandler, as net/http's server takes it).
func serve(h http.Handler, w http.ResponseWriter, r *http.Request) (whole bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler { //nolint:errorlint // the sentinel itself is panicked
				panic(v)
			}
			whole = false
		}
	}()
	h.ServeHTTP(w, r)
	return true
}

// responseWriter is an http.ResponseWriter on a stream. As net/http's own HTTP/2 server does, it
// holds the final head until the first Write or Flush, or the handler's end: a response with
// no body then goes out as one HEADERS frame that ends the stream (gRPC's trailers-only form),
// and trailers (declared in Trailer, or set with http.TrailerPrefix) end the stream as a
// trailer block instead of an empty DATA frame.
type responseWriter struct {
	tunnel   bool   // an extended CONNECT: the handler may take the stream over (Hijack)
	hijacked bool   // it did: the tunnel ends the stream
	raddr    string // for the tunnel's RemoteAddr
	st       *Stream
	hdr      http.Header
	code     int  // the final status, once WriteHeader took it
	sent     bool // the final head was sent
	declared []string
	block    []byte
	err      error
}

// Header implements http.ResponseWriter.
func (w *responseWriter) Header() http.Header { return w.hdr }

// WriteHeader takes the response head: 1xx heads are sent as they come (except 100, which
// HTTP/2 clients need not be told here), the final one when the body starts.
func (w *responseWriter) WriteHeader(code int) {
	if w.code != 0 || code == http.StatusContinue {
		return
	}
	if code >= 200 {
		w.code = code
		w.declared = w.hdr.Values("Trailer")
		return
	}
	if err := w.st.Respond(w.headBlock(code), nil, false); err != nil {
		w.err = err
	}
}

// headBlock encodes :status and the header fields HTTP/2 carries.
func (w *responseWriter) headBlock(code int) []byte {
	w.block = AppendStatus(w.block[:0], code)
	for k, vs := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) || !ResponseField([]byte(k)) || k == "Trailer" {
			continue
		}
		for _, v := range vs {
			w.block = AppendField(w.block, []byte(k), []byte(v))
		}
	}
	return w.block
}

// sendHead sends the final head (200 if none was set), ending the stream with it when end.
func (w *responseWriter) sendHead(end bool) {
	if w.sent {
		return
	}
	if w.code == 0 {
		w.WriteHeader(http.StatusOK)
	}
	w.sent = true
	if w.err == nil {
		w.err = w.st.Respond(w.headBlock(w.code), nil, end)
	}
}

// Write implements http.ResponseWriter.
func (w *responseWriter) Write(p []byte) (int, error) {
	w.sendHead(false)
	if w.err != nil {
		return 0, w.err
	}
	if err := w.st.Data(p, false); err != nil {
		w.err = err
		return 0, err
	}
	return len(p), nil
}

// Flush implements http.Flusher: it sends a held head; every Write is already on its way.
func (w *responseWriter) Flush() { w.sendHead(false) }

// trailerBlock encodes the trailers the handler set, or returns nil when there are none.
func (w *responseWriter) trailerBlock() []byte {
	w.block = w.block[:0]
	add := func(name string, vs []string) {
		if !ResponseField([]byte(name)) {
			return
		}
		for _, v := range vs {
			w.block = AppendField(w.block, []byte(name), []byte(v))
		}
	}
	for _, d := range w.declared {
		for _, name := range strings.Split(d, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			add(name, w.hdr[name])
		}
	}
	for k, vs := range w.hdr {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok {
			add(name, vs)
		}
	}
	if len(w.block) == 0 {
		return nil
	}
	return w.block
}

// finish ends the response: the held head alone when nothing followed it, then the trailers
// or an empty DATA frame that ends the stream.
func (w *responseWriter) finish() {
	if w.hijacked {
		return
	}
	trailers := w.trailerBlock()
	if !w.sent && trailers == nil {
		w.sendHead(true)
		return
	}
	trailers = append([]byte(nil), trailers...) // sendHead reuses w.block
	w.sendHead(false)
	if w.err != nil {
		return
	}
	if trailers != nil {
		_ = w.st.Trailers(trailers)
		return
	}
	_ = w.st.Data(nil, true)
}

// ResponseField reports a response field HTTP/2 carries (connection-specific ones are not,
// RFC 9113 8.2.2; the other hop-by-hop fields are the handler's to drop).
func ResponseField(name []byte) bool {
	for _, h := range [...]string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"} {
		if len(h) == len(name) && bytes.EqualFold(name, []byte(h)) {
			return false
		}
	}
	return true
}
