package edge

import (
	"net"
	"net/http"
	"strings"
)

// Poisoning defences. On a miss every request field the cache does not key on reaches the origin,
// and the answer is stored for everyone: an application that builds links from X-Forwarded-Host,
// picks a scheme from X-Forwarded-Proto or routes on X-Original-URL can be made to produce a
// response that is then served to every later client. So the edge sets the forwarding fields from
// its own view of the connection and strips the fields that override a request's host, scheme,
// path or method, unless the operator forwards them (request_headers.forward) or keys on them
// (request_headers.key).

// strippedRequestFields are removed from requests sent upstream unless listed in
// request_headers.forward or request_headers.key.
var strippedRequestFields = []string{
	"X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Scheme", "X-Forwarded-Server",
	"X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Ssl", "X-Url-Scheme", "Front-End-Https",
	"X-Original-Url", "X-Rewrite-Url", "X-Original-Host", "X-Host", "Forwarded",
	"X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
}

// forwardingFields sets the fields of an upstream request that describe the client's request as
// the edge received it: X-Forwarded-For with the peer appended (one line), X-Forwarded-Proto
// (clientScheme) and X-Forwarded-Host from the edge's own listener and the request's Host, and Via; the override
// fields are stripped. out holds the end-to-end copy of r's header.
func (e *Edge) forwardingFields(out http.Header, r *http.Request) {
	for _, n := range strippedRequestFields {
		if !e.passes[n] {
			delete(out, n)
		}
	}
	if !e.passes["X-Forwarded-Proto"] {
		out["X-Forwarded-Proto"] = []string{clientScheme(r)}
	}
	if !e.passes["X-Forwarded-Host"] {
		out["X-Forwarded-Host"] = []string{r.Host}
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		chain := strings.Join(r.Header.Values("X-Forwarded-For"), ", ")
		if chain != "" {
			chain += ", "
		}
		out["X-Forwarded-For"] = []string{chain + ip}
	}
	out.Add("Via", viaValue)
}

// clientScheme is the scheme the client came over: https when its connection is TLS. Every
// path sets r.TLS for a TLS client (net/http, withTLSState behind h1's guard, internal/h2,
// quic-go's HTTP/3), and the plain listener's fast path builds requests without it; L7 derives
// its scheme from the listener the same way (l7 schemeOf).
func clientScheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// passSet is the set of request fields the operator lets through (forwarded or keyed).
func passSet(c RequestHeadersConfig) map[string]bool {
	m := map[string]bool{}
	for _, n := range append(append([]string(nil), c.Forward...), c.Key...) {
		m[n] = true
	}
	return m
}

// varyOf returns the request fields a response's variants are keyed on: request_headers.key,
// then the response's own Vary names, without repeats.
func (e *Edge) varyOf(resp http.Header) []string {
	names := varyNames(resp)
	if len(e.cfg.RequestHeaders.Key) == 0 {
		return names
	}
	out := append([]string(nil), e.cfg.RequestHeaders.Key...)
	for _, n := range names {
		dup := false
		for _, k := range out {
			dup = dup || k == n
		}
		if !dup {
			out = append(out, n)
		}
	}
	return out
}
