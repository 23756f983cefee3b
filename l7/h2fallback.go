package l7

import (
	"context"
	"net/http"

	"github.com/switchyard/switchyard/internal/h2"
)

// What the core does not serve on an HTTP/2 stream (no route, paths that fail normalisation,
// sticky pools, extended CONNECT, Expect and the other shapes docs/l7.md lists) goes to
// the net/http handler (ServeHTTP: ReverseProxy and its transports) on the stream
// (h2.ServeHandler). inline is the body already taken into the request's buffer.
func (hc *h2Conn) fallback(st *h2.Stream, inline []byte) {
	var h http.Handler = hc.s
	if hc.altSvc != nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Alt-Svc"] = []string{string(hc.altSvc[len("Alt-Svc: ") : len(hc.altSvc)-2])}
			hc.s.ServeHTTP(w, r)
		})
	}
	h2.ServeHandler(st, h, h2.HandlerOptions{RemoteAddr: hc.raddr.String(), TLS: hc.tls, Prefix: inline,
		Context: context.WithValue(context.WithValue(context.Background(), schemeKey, hc.scheme), certHeaderKey, string(hc.certHeader))})
}
