// Package adminauth holds the rules every stop's admin listener follows: it binds to loopback
// unless the address names another host, a mutating endpoint needs a bearer token (compared in
// constant time), and an admin address reachable from other hosts without a token is refused at
// start. The L4 daemon's control API is a root-only unix socket instead. The L7 and edge admin
// APIs both authenticate through Require.
package adminauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Loopback gives an address without a host (":9901") the loopback host, so that an admin
// listener is only reachable from other hosts when its address says so. Other addresses are
// returned as they are.
func Loopback(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "" {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// IsLoopback reports whether a host:port listens on loopback only (127.0.0.0/8, ::1,
// localhost).
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// Check refuses an admin address reachable from other hosts when no token protects it.
func Check(addr, token string) error {
	if token == "" && !IsLoopback(addr) {
		return fmt.Errorf("%q is reachable from other hosts and admin.token is not set: set a token (admin.token or admin.token_file), or listen on 127.0.0.1", addr)
	}
	return nil
}

// BearerToken returns the token of an Authorization value of the Bearer scheme (RFC 6750 2.1).
// The scheme name is case-insensitive (RFC 9110 11.1: "bearer" and "BEARER" are Bearer too), and
// one or more spaces may follow it.
func BearerToken(authorization string) (string, bool) {
	scheme, token, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token != ""
}

// TokenEqual compares a presented secret with the configured one in constant time, lengths
// included: subtle.ConstantTimeCompare returns at once when the lengths differ, which would tell
// a guesser the token's length, so it compares their SHA-256 digests (always 32 bytes).
func TokenEqual(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// Require wraps a mutating handler: it answers 401 unless the request carries
// "Authorization: Bearer <token>", and 403 when no token is configured (the endpoint then
// refuses every change: configure one to use it). token is read at each request, so that a
// reload that changes it takes effect.
func Require(token func() string, realm string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token := token()
		if token == "" {
			http.Error(w, "forbidden: this admin endpoint changes the running state and admin.token is not set: set admin.token (or admin.token_file) and send Authorization: Bearer <token>", http.StatusForbidden)
			return
		}
		got, ok := BearerToken(r.Header.Get("Authorization"))
		if !ok || !TokenEqual(got, token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+realm+`"`)
			http.Error(w, "unauthorized: send Authorization: Bearer <admin.token>", http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}
