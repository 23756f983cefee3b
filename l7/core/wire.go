package core

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/switchyard/switchyard/internal/h1"
)

// Header names the core looks at, and the fields it never copies as they are: hop-by-hop ones
// (RFC 9110 7.6.1, the same list as httputil.ReverseProxy) and those it rewrites itself.
var (
	hHost        = []byte("Host")
	hConnection  = []byte("Connection")
	hExpect      = []byte("Expect")
	hTE          = []byte("Te")
	hXFF         = []byte("X-Forwarded-For")
	hForwarded   = []byte("Forwarded")
	hVia         = []byte("Via")
	hContentType = []byte("Content-Type")
	hClose       = []byte("close")
	hTrailers    = []byte("trailers")

	hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
		"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}
	rewrittenRequest = []string{"Host", "Content-Length", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Proto", "Forwarded", "Via"}
	// The response keeps Trailer: a chunked body's trailer fields are forwarded (h1.Chunked).
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

// ParseRequestLine reads a request line (h1.ParseRequestLine) the core serves: origin form and
// HTTP/1.1; anything else (HTTP/1.0, other target forms, CONNECT, the HTTP/2 preface) is not
// for the core (ok false).
func ParseRequestLine(line []byte) (method string, target []byte, ok bool) {
	m, target, version, ok := h1.ParseRequestLine(line)
	if !ok || string(version) != "HTTP/1.1" || target[0] != '/' {
		return "", nil, false
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

// StatusCode reads the status of "HTTP/1.x NNN reason".
func StatusCode(line []byte) (int, bool) {
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

// StatusText is http.StatusText with a fallback for unknown codes.
func StatusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status code " + strconv.Itoa(code)
}

// AppendTarget appends path?query.
func AppendTarget(dst []byte, path string, query []byte) []byte {
	dst = append(dst, path...)
	if query != nil {
		dst = append(append(dst, '?'), query...)
	}
	return dst
}

// ReqInfo is what the core learns from a request head's fields in one scan.
type ReqInfo struct {
	Host           []byte
	hosts          int
	Close          bool // Connection: close
	teTrailers     bool
	xff            int // number of X-Forwarded-For fields
	forwarded, via []byte
	// Unsafe: something the core does not serve (Expect, Upgrade, odd Host, values net/http
	// would refuse, a Transfer-Encoding other than plain chunked); net/http takes the request.
	Unsafe bool
	// Tokens are the Connection header's tokens (fields named there are hop-by-hop).
	Tokens [][]byte
	// GRPC: the Content-Type is gRPC's (IsGRPC); failures are answered in gRPC's terms.
	GRPC bool
	// GRPCWeb: the Content-Type is gRPC-Web's binary one (IsGRPCWeb).
	GRPCWeb bool
	// UpstreamHost, when set, is the Host sent to the backend (a route's URL rewrite); the
	// forwarding fields keep the client's Host.
	UpstreamHost []byte
}

// HostUpstream is the Host the backend gets: UpstreamHost, or the client's.
func (ri *ReqInfo) HostUpstream() []byte {
	if ri.UpstreamHost != nil {
		return ri.UpstreamHost
	}
	return ri.Host
}

// Inspect scans the request's fields once; tokens is reused for ReqInfo.Tokens.
func Inspect(h *h1.Head, tokens [][]byte) ReqInfo {
	ri := ReqInfo{Tokens: tokens[:0]}
	for _, f := range h.Fields {
		if h1.HasCTL(f.Value) {
			ri.Unsafe = true
		}
		switch {
		case bytes.EqualFold(f.Name, hHost):
			ri.Host = f.Value
			ri.hosts++
		case bytes.EqualFold(f.Name, hConnection):
			n := len(ri.Tokens)
			ri.Tokens = h1.AppendElements(ri.Tokens, f.Value)
			ri.Close = ri.Close || named(ri.Tokens[n:], hClose)
		case bytes.EqualFold(f.Name, hExpect):
			ri.Unsafe = true
		case bytes.EqualFold(f.Name, hTE):
			ri.teTrailers = ri.teTrailers || named(h1.AppendElements(nil, f.Value), hTrailers)
		case bytes.EqualFold(f.Name, hXFF):
			ri.xff++
		case len(f.Name) == len(hContentType) && bytes.EqualFold(f.Name, hContentType):
			ri.GRPC = IsGRPC(string(f.Value))
			ri.GRPCWeb = IsGRPCWeb(string(f.Value))
		case bytes.EqualFold(f.Name, hForwarded):
			if ri.forwarded == nil {
				ri.forwarded = f.Value
			}
		case bytes.EqualFold(f.Name, hVia):
			if ri.via == nil {
				ri.via = f.Value
			}
		}
	}
	if ri.hosts != 1 || !h1.PlainHost(ri.Host) || h.Upgrade ||
		(h.Chunked && !bytes.EqualFold(h.TransferEncoding, []byte("chunked"))) {
		ri.Unsafe = true
	}
	return ri
}

// named reports a field named by the message's Connection header (hop-by-hop by declaration).
func named(tokens [][]byte, name []byte) bool {
	for _, t := range tokens {
		if bytes.EqualFold(t, name) {
			return true
		}
	}
	return false
}

// Client is the downstream side a head is rewritten for.
type Client struct {
	IP     string // the client's address, without port
	Scheme string // http or https
	// CertHeader, on a mutual-TLS listener, is the field the verified client subject goes in
	// (CertSubject, when there is one); the client's own copies of it are never forwarded.
	CertHeader, CertSubject []byte
}

// UpstreamHead appends the HTTP/1.1 request head for the backend to dst: the request line
// with the cleaned target, Host, the fields UpstreamFields gives, then the request's own
// framing.
func UpstreamHead(dst []byte, h *h1.Head, ri *ReqInfo, method string, target []byte, cl Client, f *HeaderFilter) []byte {
	out := append(dst, method...)
	out = append(append(append(out, ' '), target...), " HTTP/1.1\r\nHost: "...)
	out = append(append(out, ri.HostUpstream()...), "\r\n"...)
	out = UpstreamFields(out, h, ri, cl, f, func(out, name, value []byte) []byte {
		return append(append(append(append(out, name...), ": "...), value...), "\r\n"...)
	})
	switch {
	case h.Chunked:
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	case h.ContentLength >= 0:
		out = strconv.AppendInt(append(out, "Content-Length: "...), h.ContentLength, 10)
		out = append(out, "\r\n"...)
	}
	return append(out, "\r\n"...)
}

// UpstreamFields passes the request's fields for the backend to field, which appends each to
// out (text for HTTP/1.1, a header map for HTTP/2): the client's fields minus hop-by-hop ones,
// modified by the route's filter (nil: none),
// TE: trailers when the client sent it, and the forwarding fields of the net/http path's
// rewrite (X-Forwarded-For appended like nginx's $proxy_add_x_forwarded_for, X-Forwarded-Host
// and -Proto, an RFC 7239 Forwarded element and Via). Host and the framing are the caller's:
// each protocol carries them its own way. The values built here are in out's spare capacity or
// in buffers of their own, passed only for the call.
func UpstreamFields(out []byte, h *h1.Head, ri *ReqInfo, cl Client, filter *HeaderFilter, field func(out, name, value []byte) []byte) []byte {
	for _, f := range h.Fields {
		if oneOf(f.Name, hopByHop) || oneOf(f.Name, rewrittenRequest) || named(ri.Tokens, f.Name) || !filter.Keep(f.Name) ||
			(cl.CertHeader != nil && bytes.EqualFold(f.Name, cl.CertHeader)) {
			continue
		}
		out = field(out, f.Name, f.Value)
	}
	if len(cl.CertSubject) > 0 {
		out = field(out, cl.CertHeader, cl.CertSubject)
	}
	for _, f := range filter.Fields() {
		out = field(out, f.Name, f.Value)
	}
	if ri.teTrailers {
		out = field(out, hTE, hTrailers)
	}
	var buf [256]byte
	v := buf[:0]
	if ri.xff > 0 {
		for _, f := range h.Fields {
			if bytes.EqualFold(f.Name, hXFF) {
				v = append(append(v, f.Value...), ", "...)
			}
		}
	}
	out = field(out, hXFF, append(v, cl.IP...))
	out = field(out, hXFH, ri.Host)
	out = field(out, hXFP, []byte(cl.Scheme))
	v = buf[:0]
	if ri.forwarded != nil {
		v = append(append(v, ri.forwarded...), ", "...)
	}
	v = append(v, "for="...)
	if bytes.IndexByte([]byte(cl.IP), ':') >= 0 {
		v = append(append(append(v, `"[`...), cl.IP...), `]"`...)
	} else {
		v = append(v, cl.IP...)
	}
	v = append(append(v, ";proto="...), cl.Scheme...)
	v = strconv.AppendQuote(append(v, ";host="...), string(ri.Host))
	out = field(out, hForwarded, v)
	v = buf[:0]
	if ri.via != nil {
		v = append(append(v, ri.via...), ", "...)
	}
	return field(out, hVia, append(v, "1.1 switchyard"...))
}

var (
	hXFH = []byte("X-Forwarded-Host")
	hXFP = []byte("X-Forwarded-Proto")
)

// ResponseTokens collects the response's Connection tokens into tokens and reports whether
// the backend will close the connection after it (HTTP/1.0, or Connection: close).
func ResponseTokens(rh *h1.Head, tokens [][]byte) (_ [][]byte, upClose bool) {
	tokens = tokens[:0]
	upClose = !bytes.HasPrefix(rh.Line, []byte("HTTP/1.1 "))
	for _, f := range rh.Fields {
		if bytes.EqualFold(f.Name, hConnection) {
			n := len(tokens)
			tokens = h1.AppendElements(tokens, f.Value)
			upClose = upClose || named(tokens[n:], hClose)
		}
	}
	return tokens, upClose
}

// ResponseHead appends the client's response head to dst: the backend's fields minus hop-by-hop
// ones (and those named in tokens, the response's Connection tokens), modified by the route's
// filter (nil: none), Via, the framing the body
// is sent with, and Connection: close when the client connection ends after it.
func ResponseHead(dst []byte, rh *h1.Head, tokens [][]byte, code int, fr Framing, closeAfter bool, filter *HeaderFilter) []byte {
	line := rh.Line
	out := append(dst, "HTTP/1.1 "...)
	if len(line) > 13 {
		out = append(out, line[9:]...)
	} else {
		out = strconv.AppendInt(out, int64(code), 10)
		out = append(append(out, ' '), StatusText(code)...)
	}
	out = append(out, "\r\n"...)
	for _, f := range rh.Fields {
		if ForwardResponseField(f.Name, tokens) && filter.Keep(f.Name) {
			out = append(append(append(append(out, f.Name...), ": "...), f.Value...), "\r\n"...)
		}
	}
	for _, f := range filter.Fields() {
		out = append(append(append(append(out, f.Name...), ": "...), f.Value...), "\r\n"...)
	}
	out = append(append(append(out, "Via: 1."...), line[7]), " switchyard\r\n"...)
	if fr == ChunkedBody || fr == CloseBody {
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	}
	if closeAfter && code >= 200 {
		out = append(out, "Connection: close\r\n"...)
	}
	return append(out, "\r\n"...)
}

// ForwardResponseField reports whether a response field named name reaches the client: not a
// hop-by-hop one, nor one the response's Connection tokens name.
func ForwardResponseField(name []byte, tokens [][]byte) bool {
	return !oneOf(name, responseHop) && !named(tokens, name)
}

// ErrorResponse appends what http.Error would write: a plain-text body with the message, the
// extra header lines (each ending in CRLF), and Connection: close when closeConn.
func ErrorResponse(dst []byte, code int, msg string, extra []byte, closeConn bool) []byte {
	buf := append(dst, "HTTP/1.1 "...)
	buf = strconv.AppendInt(buf, int64(code), 10)
	buf = append(append(append(buf, ' '), StatusText(code)...), "\r\n"...)
	buf = append(buf, "Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n"...)
	buf = append(buf, extra...)
	if closeConn {
		buf = append(buf, "Connection: close\r\n"...)
	}
	buf = append(buf, "Content-Length: "...)
	buf = strconv.AppendInt(buf, int64(len(msg)+1), 10)
	return append(append(append(buf, "\r\n\r\n"...), msg...), '\n')
}

// EachLine calls f with the name and value of each header line in lines ("Name: value" CRLF
// each, as the core builds the extra fields of its answers), for an engine that writes fields
// rather than text (HTTP/2 frames, an http.Header).
func EachLine(lines []byte, f func(name, value []byte)) {
	for len(lines) > 0 {
		line, rest, _ := bytes.Cut(lines, []byte("\r\n"))
		lines = rest
		if c := bytes.IndexByte(line, ':'); c > 0 {
			f(line[:c], bytes.TrimLeft(line[c+1:], " "))
		}
	}
}

// ShedHeaders are the extra fields of a deliberately shed request's 503.
var ShedHeaders = []byte("Retry-After: 1\r\nX-Load-Shed: 1\r\n")
