// Package origin holds the HTTP client the edge fetches with, from origins and upper tiers, and
// its leniency toward responses Go's client refuses: a Transfer-Encoding other than a lone
// "chunked" is rewritten under the client as the response arrives (tefix.go) and the codings it
// set aside are undone on the response (codings.go), so such an origin is cached as other caches
// cache it instead of answered 502. The two halves are one feature and live here together, apart
// from the edge's cache logic, which sees only NewTransport and UndoCodings.
package origin

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"time"
)

// Trust holds the TLS settings of the HTTPS origins and upper tiers that have any, by their
// "host:port"; one not listed is verified against the system's roots and gets no client
// certificate. Nothing is ever fetched unverified.
type Trust map[string]Peer

// Peer is one HTTPS origin's or upper tier's TLS settings.
type Peer struct {
	// Roots are the authorities it is verified against (nil: the system's roots).
	Roots *x509.CertPool
	// Cert is the client certificate presented to it (mutual TLS between tiers); nil: none.
	Cert *tls.Certificate
}

// NewTransport returns the transport the edge sends its fetches and tier probes through: origins
// addressed directly (never through an environment proxy), encodings passed through untouched
// (Vary keys the variants), pooled keep-alive connections, HTTP/1.1 over TLS verified against
// trust, and every connection read through teConn. Responses it returns must go through
// UndoCodings.
func NewTransport(trust Trust) *http.Transport {
	dialPlain, dialTLS := teDialers(&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}, trust)
	return &http.Transport{
		Proxy:               nil,
		DialContext:         dialPlain,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		DialTLSContext:      dialTLS,
	}
}
