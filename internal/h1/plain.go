package h1

import "bytes"

// The fast paths (l7/core and the edge's) serve a request themselves only when its target and
// Host are plain: bytes that need neither decoding nor escaping, which net/http's url package
// gives back unchanged. Anything else goes to net/http, whose reading is the reference. The
// character sets are RFC 3986's, narrowed to what is plain.

// PlainPath reports a path of pchar (RFC 3986 3.3) and '/', without '%': a path that needs
// neither decoding nor escaping.
func PlainPath(p []byte) bool {
	for _, ch := range p {
		if !pathByte[ch] {
			return false
		}
	}
	return true
}

// pathByte marks the bytes of a plain path: a table, as every hit's path goes through it.
var pathByte = func() (t [256]bool) {
	for ch := range 256 {
		t[ch] = isUnreserved(byte(ch)) || bytes.IndexByte([]byte("!$&'()*+,;=:@/"), byte(ch)) >= 0
	}
	return t
}()

// PlainQuery reports a query of visible ASCII without '#', which net/http forwards verbatim.
func PlainQuery(q []byte) bool {
	for _, ch := range q {
		if ch <= ' ' || ch >= 0x7f || ch == '#' {
			return false
		}
	}
	return true
}

// PlainTarget reports an origin-form target (RFC 9112 3.2.1) of a plain path and an optional
// plain query: net/http's URL.RequestURI() gives its bytes back unchanged, so a cache key made
// from it is the one net/http's request would make.
func PlainTarget(t []byte) bool {
	if len(t) == 0 || t[0] != '/' {
		return false
	}
	path, query, _ := bytes.Cut(t, []byte("?"))
	return PlainPath(path) && PlainQuery(query)
}

// PlainHost reports a non-empty Host value of unreserved characters, ':', '[' and ']': a host
// name or an IPv4 or bracketed IPv6 address with an optional port, nothing to decode.
func PlainHost(h []byte) bool {
	if len(h) == 0 {
		return false
	}
	for _, ch := range h {
		if !isUnreserved(ch) && ch != ':' && ch != '[' && ch != ']' {
			return false
		}
	}
	return true
}

// isUnreserved reports an RFC 3986 unreserved character: ALPHA, DIGIT, '-', '.', '_', '~'.
func isUnreserved(ch byte) bool {
	switch {
	case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9':
		return true
	}
	return ch == '-' || ch == '.' || ch == '_' || ch == '~'
}

// AppendElements appends the elements of a comma-separated list value (RFC 9110 5.6.1), OWS
// trimmed and empty elements skipped, to dst: the reading of Connection and TE that
// net/http/httputil's ReverseProxy applies.
func AppendElements(dst [][]byte, v []byte) [][]byte {
	for len(v) > 0 {
		var el []byte
		el, v, _ = bytes.Cut(v, []byte(","))
		if el = trimOWS(el); len(el) > 0 {
			dst = append(dst, el)
		}
	}
	return dst
}

// HasToken reports whether v holds token, as net/http's server reads a Connection field:
// case-insensitive, delimited by SP, HTAB or commas (so "x close" holds "close", unlike the
// list grammar AppendElements reads).
func HasToken(v []byte, token string) bool {
	for i := 0; i+len(token) <= len(v); i++ {
		if !bytes.EqualFold(v[i:i+len(token)], []byte(token)) {
			continue
		}
		if (i == 0 || isTokenBoundary(v[i-1])) && (i+len(token) == len(v) || isTokenBoundary(v[i+len(token)])) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }
