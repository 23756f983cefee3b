package l7

import (
	"context"

	"github.com/switchyard/switchyard/internal/h2"
)

// What the core does not serve on an HTTP/2 stream (no route, paths that fail normalisation,
// sticky pools, h2/h2c upstream pools, Expect and the other shapes docs/l7.md lists) goes to
// the net/http handler (ServeHTTP: ReverseProxy and its transports) on the stream
// (h2.ServeHandler). inline is the body already taken into the request's buffer.
func (hc *h2Conn) fallback(st *h2.Stream, inline []byte) {
	h2.ServeHandler(st, hc.s, h2.HandlerOptions{RemoteAddr: hc.raddr.String(), TLS: hc.tls, Prefix: inline,
		Context: context.WithValue(context.Background(), schemeKey, hc.scheme)})
}
