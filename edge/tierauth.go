package edge

import (
	"net/http"

	"github.com/switchyard/switchyard/internal/adminauth"
)

// The tier marker (TierHeader) makes an edge act as an upper tier: it fetches a miss from the
// origin directly, skipping its own tier chain, and counts the request as a lower tier's. Taken
// from anyone, it would let any client skip the tier chain (and skew the analytics), so an edge
// honours it only when its value is the edge-wide shared secret tiers.token, which lower tiers
// send; any other value is removed before the request is served.

// tierMarker is the value this edge sends in TierHeader to its upper tiers.
func (e *Edge) tierMarker() string {
	if e.cfg.Tiers.Token != "" {
		return e.cfg.Tiers.Token
	}
	return "1" // no shared secret: the upper tier treats the request as a client's
}

// tierAuthentic reports whether a TierHeader value carries this edge's tiers.token, compared
// in constant time (its length too). Without a token configured no marker is honoured.
func (e *Edge) tierAuthentic(v []byte) bool {
	tok := e.cfg.Tiers.Token
	return tok != "" && adminauth.TokenEqual(string(v), tok)
}

// checkTierMarker strips a TierHeader that does not authenticate, so only real lower tiers get
// the upper-tier treatment.
func (e *Edge) checkTierMarker(r *http.Request) {
	vs, ok := r.Header[TierHeader]
	if !ok {
		return
	}
	if len(vs) != 1 || !e.tierAuthentic([]byte(vs[0])) {
		r.Header.Del(TierHeader)
		return
	}
	if !e.tierPeerVerified(r) { // edge/tiermtls.go
		r.Header.Del(TierHeader)
		e.warn("edge tier marker refused: no client certificate of tiers.client_ca_file on the connection; give the lower tier tiers.client_cert and an https:// URL of this edge",
			"remote", r.RemoteAddr, "tls", r.TLS != nil)
	}
}
