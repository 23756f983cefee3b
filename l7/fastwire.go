package l7

import (
	"bytes"
	"strconv"
)

// Header names the fast path looks at, and the fields it never copies as they are: hop-by-hop
// ones (RFC 9110 7.6.1, the same list as httputil.ReverseProxy) and those it rewrites itself.
var (
	hHost       = []byte("Host")
	hConnection = []byte("Connection")
	hExpect     = []byte("Expect")
	hTE         = []byte("Te")
	hXFF        = []byte("X-Forwarded-For")
	hForwarded  = []byte("Forwarded")
	hVia        = []byte("Via")

	hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}
	rewrittenRequest = []string{"Host", "Content-Length", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Proto", "Forwarded", "Via"}
	// The response keeps Trailer: the chunked body passes through with its trailers.
	responseHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Transfer-Encoding", "Upgrade"}
)

// oneOf reports whether name is in list, ignoring case.
func oneOf(name []byte, list []string) bool {
	for _, h := range list {
		if len(h) == len(name) && bytes.EqualFold(name, []byte(h)) {
			return true
		}
	}
	return false
}

// parseRequestLine splits "METHOD SP origin-form SP HTTP/1.1"; anything else is not ours.
func parseRequestLine(line []byte) (method string, target []byte, ok bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return "", nil, false
	}
	m, rest := line[:sp], line[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp <= 0 || string(rest[sp+1:]) != "HTTP/1.1" {
		return "", nil, false
	}
	target = rest[:sp]
	if target[0] != '/' {
		return "", nil, false
	}
	for _, ch := range m {
		if !isTokenByte(ch) {
			return "", nil, false
		}
	}
	// Common methods without an allocation (the compiler does not copy for a switch).
	switch string(m) {
	case "GET":
		method = "GET"
	case "HEAD":
		method = "HEAD"
	case "POST":
		method = "POST"
	case "PUT":
		method = "PUT"
	case "DELETE":
		method = "DELETE"
	case "OPTIONS":
		method = "OPTIONS"
	case "PATCH":
		method = "PATCH"
	case "CONNECT", "PRI":
		return "", nil, false
	default:
		method = string(m)
	}
	return method, target, true
}

func isTokenByte(ch byte) bool {
	switch {
	case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9':
		return true
	}
	return bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), ch) >= 0
}

// statusCode reads the status of "HTTP/1.x NNN reason".
func statusCode(line []byte) (int, bool) {
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' || (len(line) > 12 && line[12] != ' ') {
		return 0, false
	}
	code := 0
	for _, ch := range line[9:12] {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		code = code*10 + int(ch-'0')
	}
	return code, code >= 100
}

// validValue rejects control characters other than HTAB, as net/http does.
func validValue(v []byte) bool {
	for _, ch := range v {
		if (ch < ' ' && ch != '\t') || ch == 0x7f {
			return false
		}
	}
	return true
}

// validHost accepts the plain host[:port] and [v6]:port shapes; others go to net/http to judge.
func validHost(h []byte) bool {
	if len(h) == 0 {
		return false
	}
	for _, ch := range h {
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9':
		case ch == '-', ch == '.', ch == ':', ch == '[', ch == ']', ch == '_':
		default:
			return false
		}
	}
	return true
}

// plainPath reports a path that needs neither decoding nor escaping.
func plainPath(p []byte) bool {
	for _, ch := range p {
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9':
		case bytes.IndexByte([]byte("-._~!$&'()*+,;=:@/"), ch) >= 0:
		default:
			return false
		}
	}
	return true
}

// plainQuery reports a query of printable ASCII, which net/http forwards verbatim too.
func plainQuery(q []byte) bool {
	for _, ch := range q {
		if ch <= ' ' || ch >= 0x7f {
			return false
		}
	}
	return true
}

// appendTarget appends path?query.
func appendTarget(dst []byte, path string, query []byte) []byte {
	dst = append(dst, path...)
	if query != nil {
		dst = append(append(dst, '?'), query...)
	}
	return dst
}

// connectionTokens adds the comma-separated tokens of a Connection value; close reports a
// "close" among them (or before).
func connectionTokens(tokens [][]byte, v []byte, close bool) ([][]byte, bool) {
	for len(v) > 0 {
		var tok []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			tok, v = v, nil
		}
		tok = bytes.TrimSpace(tok)
		if len(tok) == 0 {
			continue
		}
		if bytes.EqualFold(tok, []byte("close")) {
			close = true
		}
		tokens = append(tokens, tok)
	}
	return tokens, close
}

// containsToken reports whether a comma-separated value lists tok.
func containsToken(v []byte, tok string) bool {
	toks, _ := connectionTokens(nil, v, false)
	for _, t := range toks {
		if bytes.EqualFold(t, []byte(tok)) {
			return true
		}
	}
	return false
}

// connNamed reports a field named by the message's Connection header (hop-by-hop by declaration).
func (fc *fastConn) connNamed(name []byte) bool {
	for _, t := range fc.tokens {
		if bytes.EqualFold(t, name) {
			return true
		}
	}
	return false
}

// buildUpstreamHead writes the request head for the backend into fc.out: the cleaned target,
// the client's fields minus hop-by-hop ones, and the forwarding fields of the net/http path's
// rewrite (X-Forwarded-For appended like nginx's $proxy_add_x_forwarded_for, X-Forwarded-Host
// and -Proto, an RFC 7239 Forwarded element and Via).
func (fc *fastConn) buildUpstreamHead(method string, target []byte, ri *reqInfo) []byte {
	out := append(fc.out[:0], method...)
	out = append(append(append(out, ' '), target...), " HTTP/1.1\r\nHost: "...)
	out = append(append(out, ri.host...), "\r\n"...)
	for _, f := range fc.head.Fields {
		if oneOf(f.Name, hopByHop) || oneOf(f.Name, rewrittenRequest) || fc.connNamed(f.Name) {
			continue
		}
		out = append(append(append(append(out, f.Name...), ": "...), f.Value...), "\r\n"...)
	}
	if ri.teTrailers {
		out = append(out, "Te: trailers\r\n"...)
	}
	out = append(out, "X-Forwarded-For: "...)
	if ri.xff > 0 {
		for _, f := range fc.head.Fields {
			if bytes.EqualFold(f.Name, hXFF) {
				out = append(append(out, f.Value...), ", "...)
			}
		}
	}
	out = append(append(out, fc.clientIP...), "\r\nX-Forwarded-Host: "...)
	out = append(append(out, ri.host...), "\r\nX-Forwarded-Proto: "...)
	out = append(append(out, fc.scheme...), "\r\nForwarded: "...)
	if ri.forwarded != nil {
		out = append(append(out, ri.forwarded...), ", "...)
	}
	out = append(out, "for="...)
	if bytes.IndexByte([]byte(fc.clientIP), ':') >= 0 {
		out = append(append(append(out, `"[`...), fc.clientIP...), `]"`...)
	} else {
		out = append(out, fc.clientIP...)
	}
	out = append(append(out, ";proto="...), fc.scheme...)
	out = strconv.AppendQuote(append(out, ";host="...), fc.req.Host)
	out = append(out, "\r\nVia: "...)
	if ri.via != nil {
		out = append(append(out, ri.via...), ", "...)
	}
	out = append(out, "1.1 switchyard\r\n"...)
	switch {
	case fc.head.Chunked:
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	case fc.head.ContentLength >= 0:
		out = strconv.AppendInt(append(out, "Content-Length: "...), fc.head.ContentLength, 10)
		out = append(out, "\r\n"...)
	}
	return append(out, "\r\n"...)
}

// buildResponseHead writes the client's response head into fc.out: the backend's fields minus
// hop-by-hop ones, Via, and the framing the fast path sends the body with (fc.tokens holds the
// response's Connection tokens).
func (fc *fastConn) buildResponseHead(code int, fr framing) []byte {
	line := fc.rhead.Line
	out := append(fc.out[:0], "HTTP/1.1 "...)
	if len(line) > 13 {
		out = append(out, line[9:]...)
	} else {
		out = strconv.AppendInt(out, int64(code), 10)
		out = append(append(out, ' '), statusText(code)...)
	}
	out = append(out, "\r\n"...)
	for _, f := range fc.rhead.Fields {
		if oneOf(f.Name, responseHop) || fc.connNamed(f.Name) {
			continue
		}
		out = append(append(append(append(out, f.Name...), ": "...), f.Value...), "\r\n"...)
	}
	out = append(append(append(out, "Via: 1."...), line[7]), " switchyard\r\n"...)
	if fr == chunkedBody || fr == closeBody {
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	}
	// A server shutting down closes the connection after this response: say so.
	if (fc.clientClose || fc.s.shutting.Load()) && code >= 200 {
		out = append(out, "Connection: close\r\n"...)
	}
	return append(out, "\r\n"...)
}

// responseTokens collects the response's Connection tokens into fc.tokens and reports whether
// the backend will close the connection after it (HTTP/1.0, or Connection: close).
func (fc *fastConn) responseTokens() (upClose bool) {
	fc.tokens = fc.tokens[:0]
	upClose = !bytes.HasPrefix(fc.rhead.Line, []byte("HTTP/1.1 "))
	for _, f := range fc.rhead.Fields {
		if bytes.EqualFold(f.Name, hConnection) {
			fc.tokens, upClose = connectionTokens(fc.tokens, f.Value, upClose)
		}
	}
	return upClose
}
