package l7

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http2"

	"github.com/switchyard/switchyard/l7/h2"
)

// What the core does not serve on an HTTP/2 stream (no route, paths that fail normalisation,
// sticky pools, h2/h2c upstream pools, Expect and the other shapes docs/l7.md lists) goes to
// the net/http handler (ServeHTTP: ReverseProxy and its transports), with the stream as its
// http.ResponseWriter. inline is the body already taken into the request's buffer.
func (hc *h2Conn) fallback(st *h2.Stream, inline []byte) {
	u, err := url.ParseRequestURI(st.Path)
	w := &h2Writer{st: st, hdr: http.Header{}}
	if err != nil || st.Path == "*" {
		http.Error(w, "bad request target", http.StatusBadRequest)
		w.finish()
		return
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
		Host: host, RemoteAddr: hc.raddr.String(), RequestURI: st.Path, TLS: hc.tls, ContentLength: st.ContentLength}
	n, whole := st.Received()
	switch {
	case whole && n == 0 && len(inline) == 0:
		r.Body, r.ContentLength = http.NoBody, 0
	case whole:
		r.ContentLength = int64(len(inline) + n)
		fallthrough
	default:
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(inline), st))
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), schemeKey, hc.scheme))
	defer cancel()
	go func() {
		select {
		case <-st.Done(): // the client reset the stream: stop the upstream request
			cancel()
		case <-ctx.Done():
		}
	}()
	if hc.serveHTTP(w, r.WithContext(ctx)) {
		w.finish()
		return
	}
	st.Reset(http2.ErrCodeInternal) // the response was cut: never end it as if whole
}

// serveHTTP runs the net/http handler and reports whether the response may end normally: false
// when the handler aborted it (http.ErrAbortHandler, as net/http's server takes it).
func (hc *h2Conn) serveHTTP(w http.ResponseWriter, r *http.Request) (whole bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler { //nolint:errorlint // the sentinel itself is panicked
				panic(v)
			}
			whole = false
		}
	}()
	hc.s.ServeHTTP(w, r)
	return true
}

// h2Writer is an http.ResponseWriter on a stream. As net/http's own HTTP/2 server does, it
// holds the final head until the first Write or Flush, or the handler's end: a response with
// no body then goes out as one HEADERS frame that ends the stream (gRPC's trailers-only form),
// and trailers (declared in Trailer, or set with http.TrailerPrefix) end the stream as a
// trailer block instead of an empty DATA frame.
type h2Writer struct {
	st       *h2.Stream
	hdr      http.Header
	code     int  // the final status, once WriteHeader took it
	sent     bool // the final head was sent
	declared []string
	block    []byte
	err      error
}

// Header implements http.ResponseWriter.
func (w *h2Writer) Header() http.Header { return w.hdr }

// WriteHeader takes the response head: 1xx heads are sent as they come (except 100, which
// HTTP/2 clients need not be told here), the final one when the body starts.
func (w *h2Writer) WriteHeader(code int) {
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
func (w *h2Writer) headBlock(code int) []byte {
	w.block = h2.AppendStatus(w.block[:0], code)
	for k, vs := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) || !h2ResponseField([]byte(k)) || k == "Trailer" {
			continue
		}
		for _, v := range vs {
			w.block = h2.AppendField(w.block, []byte(k), []byte(v))
		}
	}
	return w.block
}

// sendHead sends the final head (200 if none was set), ending the stream with it when end.
func (w *h2Writer) sendHead(end bool) {
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
func (w *h2Writer) Write(p []byte) (int, error) {
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
func (w *h2Writer) Flush() { w.sendHead(false) }

// trailerBlock encodes the trailers the handler set, or returns nil when there are none.
func (w *h2Writer) trailerBlock() []byte {
	w.block = w.block[:0]
	add := func(name string, vs []string) {
		if !h2ResponseField([]byte(name)) {
			return
		}
		for _, v := range vs {
			w.block = h2.AppendField(w.block, []byte(name), []byte(v))
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
func (w *h2Writer) finish() {
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
