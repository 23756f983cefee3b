package h1

import (
	"bytes"
	"fmt"
	"io"
)

// Rejection is a refused message: the status and the reason sent to the client.
type Rejection struct {
	Status int
	Reason string
}

// Error implements error.
func (r *Rejection) Error() string { return fmt.Sprintf("refuse request: %d %s", r.Status, r.Reason) }

// ErrHeadTooLong is the refusal of a request head over the size limit.
var ErrHeadTooLong = &Rejection{Status: 431, Reason: "request header fields too large"}

// WriteRejection writes the refusal response (which closes the connection) to w. The guard and
// the fast paths answer refused requests with these same bytes.
func WriteRejection(w io.Writer, r *Rejection) error {
	body := r.Reason + "\n"
	_, err := fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		r.Status, statusText(r.Status), len(body), body)
	return err
}

func statusText(code int) string {
	switch code {
	case 431:
		return "Request Header Fields Too Large"
	default:
		return "Bad Request"
	}
}

// HeadEnd returns the length of the head at the start of b (through the blank line that ends
// it), or -1 when b does not hold a whole head yet; the search starts at offset from, so a caller
// that appends data can resume where it stopped (from = previous length - 3). A head ending in a
// bare LF is found too, so that ParseHead can refuse it.
func HeadEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

// Field is one header field of a head; both slices point into the head's bytes.
type Field struct {
	Name, Value []byte
}

// Head is a parsed request (or response) head. ParseHead reuses its slices, so a connection can
// keep one Head for all its requests; every byte slice points into the parsed buffer.
type Head struct {
	// Line is the first line (request line or status line) without its CRLF.
	Line []byte
	// Fields are the header fields in order, values trimmed of surrounding SP and HTAB.
	Fields []Field
	// ContentLength is the body length from Content-Length, or -1 when absent.
	ContentLength int64
	// Chunked reports a Transfer-Encoding whose final coding is chunked; TransferEncoding holds
	// the combined field value.
	Chunked          bool
	TransferEncoding []byte
	// Upgrade reports an Upgrade header field.
	Upgrade bool
}

var (
	nameContentLength    = []byte("Content-Length")
	nameTransferEncoding = []byte("Transfer-Encoding")
	nameUpgrade          = []byte("Upgrade")
)

// ParseHead parses and screens one head (which must end with its blank line, see HeadEnd) into
// h. It refuses the shapes a proxy must not forward: a line not ending in CRLF, control
// characters other than HTAB, obsolete line folding, invalid field names, Content-Length
// together with Transfer-Encoding, duplicate or invalid Content-Length, and a Transfer-Encoding
// that is not a list of tokens ending in a single chunked. The first line is only checked for
// control characters; reading it is left to the caller (ParseRequestLine for requests).
func ParseHead(head []byte, h *Head) *Rejection {
	h.Line, h.Fields, h.ContentLength, h.Chunked, h.TransferEncoding, h.Upgrade = nil, h.Fields[:0], -1, false, nil, false
	var cl []byte
	ncl, nte := 0, 0
	first := true
	for len(head) > 0 {
		i := bytes.IndexByte(head, '\n')
		if i < 1 || head[i-1] != '\r' {
			return &Rejection{400, "header line does not end with CRLF (RFC 9112 2.2)"}
		}
		l := head[:i-1]
		head = head[i+1:]
		if first {
			if len(l) == 0 || HasCTL(l) {
				return &Rejection{400, "invalid start line"}
			}
			h.Line, first = l, false
			continue
		}
		if len(l) == 0 {
			break // the blank line that ends the head
		}
		f, rej := parseField(l)
		if rej != nil {
			return rej
		}
		h.Fields = append(h.Fields, f)
		switch {
		case bytes.EqualFold(f.Name, nameContentLength):
			cl = f.Value
			ncl++
		case bytes.EqualFold(f.Name, nameTransferEncoding):
			if nte == 0 {
				h.TransferEncoding = f.Value
			} else {
				// Rare: several fields; join them once (allocation only on this path).
				h.TransferEncoding = append(append(append([]byte(nil), h.TransferEncoding...), ','), f.Value...)
			}
			nte++
		case bytes.EqualFold(f.Name, nameUpgrade):
			h.Upgrade = true
		}
	}
	return h.framing(cl, ncl, nte)
}

// framing decides the body framing from the Content-Length and Transfer-Encoding fields seen.
func (h *Head) framing(cl []byte, ncl, nte int) *Rejection {
	if ncl > 0 && nte > 0 {
		return &Rejection{400, "Content-Length together with Transfer-Encoding"}
	}
	if ncl > 1 {
		return &Rejection{400, "duplicate Content-Length"}
	}
	switch {
	case nte > 0:
		// Only "chunked" as the final coding frames a request; anything else is refused.
		if !endsWithChunked(h.TransferEncoding) {
			return &Rejection{400, "Transfer-Encoding must be a token list ending in one chunked"}
		}
		h.Chunked = true
	case ncl == 1:
		n, ok := parseDecimal(cl)
		if !ok {
			return &Rejection{400, fmt.Sprintf("invalid Content-Length %q", cl)}
		}
		h.ContentLength = n
	}
	return nil
}

// parseField reads one field line (without its CRLF): token ":" OWS field-value OWS.
func parseField(l []byte) (Field, *Rejection) {
	if l[0] == ' ' || l[0] == '\t' {
		return Field{}, &Rejection{400, "obsolete line folding is not allowed (RFC 9112 5.2)"}
	}
	colon := bytes.IndexByte(l, ':')
	if colon <= 0 {
		return Field{}, &Rejection{400, "invalid header line"}
	}
	name := l[:colon]
	for _, ch := range name {
		if !IsTokenChar(ch) {
			return Field{}, &Rejection{400, fmt.Sprintf("invalid header name %q", name)}
		}
	}
	value := trimOWS(l[colon+1:])
	if HasCTL(value) {
		return Field{}, &Rejection{400, fmt.Sprintf("invalid character in header %q", name)}
	}
	return Field{name, value}, nil
}

// HasCTL reports a control character other than HTAB (NUL, CR, LF, DEL, ...): field values and
// start lines may hold SP, HTAB, visible ASCII and obs-text only (RFC 9110 5.5). net/http
// refuses a field value that has one.
func HasCTL(b []byte) bool {
	for _, ch := range b {
		if (ch < ' ' && ch != '\t') || ch == 0x7f {
			return true
		}
	}
	return false
}

// trimOWS removes leading and trailing SP and HTAB (and nothing else: not the Unicode spaces
// bytes.TrimSpace knows).
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// parseDecimal parses a Content-Length: digits only (no sign, no list), at most 18 of them.
func parseDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
	}
	return n, true
}

// endsWithChunked reports a Transfer-Encoding that is a comma-separated list of tokens (OWS
// around the commas) whose last element, and only that one, is chunked (RFC 9112 6.1). Codings
// with parameters and empty elements are refused: no client that matters sends them.
func endsWithChunked(te []byte) bool {
	for {
		el, rest, more := bytes.Cut(te, []byte(","))
		el = trimOWS(el)
		if len(el) == 0 {
			return false
		}
		for _, ch := range el {
			if !IsTokenChar(ch) {
				return false
			}
		}
		chunked := bytes.EqualFold(el, []byte("chunked"))
		if !more {
			return chunked
		}
		if chunked {
			return false // chunked must be the last coding, and applied once
		}
		te = rest
	}
}

// IsToken reports whether b is a token (RFC 9110 5.6.2): one or more token characters.
func IsToken(b []byte) bool {
	for _, ch := range b {
		if !IsTokenChar(ch) {
			return false
		}
	}
	return len(b) > 0
}

// IsTokenChar reports whether ch may appear in a token such as a field name or a method
// (RFC 9110 5.6.2 tchar).
func IsTokenChar(ch byte) bool {
	switch {
	case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9':
		return true
	}
	switch ch {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// ParseRequestLine splits a request line (RFC 9112 3): method SP request-target SP
// HTTP-version, with a token method, a target of visible characters and obs-text, and a
// version HTTP/DIGIT.DIGIT. ok is false for anything else.
func ParseRequestLine(line []byte) (method, target, version []byte, ok bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 {
		return nil, nil, nil, false
	}
	method, rest := line[:sp], line[sp+1:]
	sp = bytes.IndexByte(rest, ' ')
	if sp <= 0 {
		return nil, nil, nil, false
	}
	target, version = rest[:sp], rest[sp+1:]
	for _, ch := range method {
		if !IsTokenChar(ch) {
			return nil, nil, nil, false
		}
	}
	for _, ch := range target {
		if ch <= ' ' || ch == 0x7f {
			return nil, nil, nil, false
		}
	}
	if len(version) != 8 || string(version[:5]) != "HTTP/" || version[6] != '.' ||
		version[5] < '0' || version[5] > '9' || version[7] < '0' || version[7] > '9' {
		return nil, nil, nil, false
	}
	return method, target, version, true
}
