package edge

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// RulesConfig holds the edge's request-forwarding, targeted-caching and client-limit settings.
// It is inlined in Config, so its fields are top-level YAML keys.
type RulesConfig struct {
	// TargetedCacheControl lists response fields that, when present, replace Cache-Control and
	// Expires for this edge (RFC 9213), most specific first, e.g.
	// [Switchyard-Cache-Control, CDN-Cache-Control]. Empty: [CDN-Cache-Control].
	TargetedCacheControl []string `yaml:"targeted_cache_control"`
	// RequestHeaders chooses which client request fields reach the origin and which are keyed.
	RequestHeaders RequestHeadersConfig `yaml:"request_headers"`
	// MaxConnections caps open client connections; past it a new connection gets 503 and is
	// closed. 0 (the default) derives the cap from the descriptor limit minus a reserve for
	// upstream connections and the disk tier; a larger value is lowered to that.
	MaxConnections int `yaml:"max_connections"`
	// StaleIfUnreachable is how long past expiry a stored response may be served when the
	// origin cannot be reached at all (refused, closed or reset connection, a response that
	// cannot be read, a fetch timeout), for responses that carry no stale-if-error: the cache is
	// disconnected (RFC 9111 4.2.4). must-revalidate, proxy-revalidate, s-maxage and no-cache
	// still forbid it. Unset: 1h; 0s turns it off. A 5xx answer is not "unreachable": it needs
	// stale-if-error or grace.
	StaleIfUnreachable *Duration `yaml:"stale_if_unreachable"`
	// ClientTimeout bounds writing one response to a client (default 60s): a client that reads
	// too slowly is cut off instead of holding its connection for good.
	ClientTimeout Duration `yaml:"client_timeout"`
}

// RequestHeadersConfig lets an operator forward request fields the edge strips by default, or
// add request fields to the cache key.
type RequestHeadersConfig struct {
	// Forward names request fields passed to the origin as the client sent them, even those the
	// edge strips or sets itself by default (X-Forwarded-Host, Forwarded, X-Original-URL, ...).
	// Only forward a field the cache also keys on, or one only a trusted hop in front can set.
	Forward []string `yaml:"forward"`
	// Key names request fields whose values become part of the cache key (each value its own
	// entry, as if every response carried Vary with them); they are forwarded too.
	Key []string `yaml:"key"`
}

// defaultTargeted is the targeted field list when none is configured (RFC 9213 2).
var defaultTargeted = []string{"Cdn-Cache-Control"}

// validate fills defaults and checks the rules' fields, canonicalising field names.
func (c *RulesConfig) validate() error {
	// Copies: the names are canonicalised in place, and the caller's slices stay theirs.
	c.TargetedCacheControl = append([]string(nil), c.TargetedCacheControl...)
	c.RequestHeaders.Forward = append([]string(nil), c.RequestHeaders.Forward...)
	c.RequestHeaders.Key = append([]string(nil), c.RequestHeaders.Key...)
	if err := canonicalNames(c.TargetedCacheControl, "targeted_cache_control"); err != nil {
		return err
	}
	for i, n := range c.TargetedCacheControl {
		if strings.EqualFold(n, "Cache-Control") {
			return &fieldError{"targeted_cache_control", fmt.Sprintf("entry %d: Cache-Control is the field targeted fields override; list fields such as CDN-Cache-Control", i+1)}
		}
	}
	if err := canonicalNames(c.RequestHeaders.Forward, "request_headers.forward"); err != nil {
		return err
	}
	if err := canonicalNames(c.RequestHeaders.Key, "request_headers.key"); err != nil {
		return err
	}
	if c.MaxConnections < 0 {
		return &fieldError{"max_connections", "negative; use 0 for the automatic cap or a positive limit"}
	}
	return nil
}

// applyDefaults fills the targeted fields, stale_if_unreachable and client_timeout.
func (c *RulesConfig) applyDefaults() {
	if len(c.TargetedCacheControl) == 0 {
		c.TargetedCacheControl = defaultTargeted
	}
	if c.StaleIfUnreachable == nil {
		d := Duration(time.Hour)
		c.StaleIfUnreachable = &d
	}
	if c.ClientTimeout == 0 {
		c.ClientTimeout = Duration(60 * time.Second)
	}
}

// canonicalNames checks that every entry is a field name the edge may forward or key on and
// rewrites it in canonical form.
func canonicalNames(names []string, field string) error {
	for i, n := range names {
		if !isToken(n) {
			return &fieldError{field, fmt.Sprintf("entry %d: %q is not a header field name; write it like X-Tenant", i+1, n)}
		}
		c := http.CanonicalHeaderKey(n)
		if c == "Host" || isHopByHop(c) {
			return &fieldError{field, fmt.Sprintf("entry %d: %s is handled by the edge itself and cannot be listed", i+1, c)}
		}
		names[i] = c
	}
	return nil
}

// isToken reports whether s is an RFC 9110 token (a valid field name).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

func isHopByHop(canonical string) bool {
	for _, h := range hopByHop {
		if h == canonical {
			return true
		}
	}
	return false
}

// loopbackHost reports whether an admin listen host is a loopback address ("" binds loopback).
func loopbackHost(host string) bool {
	if host == "" || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
