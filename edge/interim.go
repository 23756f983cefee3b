package edge

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
)

// Interim (1xx) responses. Go's client reads a 103 Early Hints (or 102) before the final
// response and drops it unless a trace asks for it; the edge forwards each one to the client that
// caused the fetch, as it arrives, so the client can start preloading before the final response.
// Interim responses are never stored and never sent to collapsed waiters or on hits: they belong
// to one exchange (RFC 9110 15.2).

// interimForwarder returns the function that passes an interim response from upstream on to w,
// or nil when r's client cannot take one (HTTP/1.0, or an internal request such as a push).
// It runs on the transport's goroutine while the handler waits for the final response, as
// net/http/httputil's ReverseProxy does.
func interimForwarder(w http.ResponseWriter, r *http.Request) func(int, textproto.MIMEHeader) error {
	if !r.ProtoAtLeast(1, 1) {
		return nil // RFC 9110 15.2: no 1xx to an HTTP/1.0 client
	}
	if _, internal := w.(*httptest.ResponseRecorder); internal {
		return nil
	}
	return func(code int, h textproto.MIMEHeader) error {
		if code == http.StatusContinue || code == http.StatusSwitchingProtocols {
			return nil // the edge sends no Expect upstream and does not tunnel upgrades
		}
		out := w.Header()
		copyHeader(out, http.Header(h))
		w.WriteHeader(code)
		// net/http keeps the header map after a 1xx; the final response must not inherit it.
		clear(out)
		return nil
	}
}

// withInterim adds fwd (when not nil) to ctx as the trace hook for interim responses.
func withInterim(ctx context.Context, fwd func(int, textproto.MIMEHeader) error) context.Context {
	if fwd == nil {
		return ctx
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{Got1xxResponse: fwd})
}
