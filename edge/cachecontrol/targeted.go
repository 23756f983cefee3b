package cachecontrol

import (
	"net/http"
	"strings"
)

// Effective returns the header a cache that honours targeted cache-control fields (RFC 9213)
// applies its rules to. targeted lists the field names this cache is the target of, most
// specific first (e.g. Switchyard-Cache-Control, CDN-Cache-Control). The first of them present
// with a valid, non-empty value replaces Cache-Control, and Expires is ignored (RFC 9213 2.2), in
// both directions: a targeted no-store, private or no-cache holds against a Cache-Control
// max-age, and a targeted max-age against a Cache-Control no-store. Without one, h is returned
// as it is. The result is a shallow copy that must not be modified.
func Effective(h http.Header, targeted []string) http.Header {
	for _, name := range targeted {
		vv := h[name]
		if len(vv) == 0 || !validTargeted(strings.Join(vv, ", ")) {
			continue // absent, or not a valid Dictionary: the next field, then Cache-Control
		}
		out := make(http.Header, len(h))
		for k, v := range h {
			if k != "Cache-Control" && k != "Expires" {
				out[k] = v
			}
		}
		out["Cache-Control"] = vv
		return out
	}
	return h
}
