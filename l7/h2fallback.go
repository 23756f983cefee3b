package l7

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"

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
	hc.s.ServeHTTP(w, r.WithContext(ctx))
	w.finish()
}

// h2Writer is an http.ResponseWriter on a stream.
type h2Writer struct {
	st    *h2.Stream
	hdr   http.Header
	wrote bool
	block []byte
	err   error
}

// Header implements http.ResponseWriter.
func (w *h2Writer) Header() http.Header { return w.hdr }

// WriteHeader sends the response head (1xx heads as they come, except 100, which HTTP/2
// clients need not be told here).
func (w *h2Writer) WriteHeader(code int) {
	if w.wrote || code == http.StatusContinue {
		return
	}
	w.block = h2.AppendStatus(w.block[:0], code)
	for k, vs := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) || !h2ResponseField([]byte(k)) || k == "Trailer" {
			continue
		}
		for _, v := range vs {
			w.block = h2.AppendField(w.block, []byte(k), []byte(v))
		}
	}
	if code >= 200 {
		w.wrote = true
	}
	if err := w.st.Respond(w.block, nil, false); err != nil {
		w.err = err
	}
}

// Write implements http.ResponseWriter.
func (w *h2Writer) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if err := w.st.Data(p, false); err != nil {
		w.err = err
		return 0, err
	}
	return len(p), nil
}

// Flush implements http.Flusher: every Write is already on its way to the client.
func (w *h2Writer) Flush() {}

func (w *h2Writer) finish() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if w.err == nil {
		_ = w.st.Data(nil, true)
	}
}
