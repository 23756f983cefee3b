// Package guard screens HTTP/1.1 request heads on a connection before the HTTP server parses
// them, refusing request-smuggling shapes that Go's server would otherwise accept by picking one
// interpretation: Content-Length together with Transfer-Encoding, duplicate or invalid
// Content-Length, obsolete line folding, and invalid header names. A proxy must refuse these,
// because the backend may pick the other interpretation and see a second, hidden request.
//
// The guard follows message framing (Content-Length and chunked bodies) so it inspects every head
// of a keep-alive connection, not just the first. Bodies pass through untouched; after an upgrade
// request or the HTTP/2 preface it steps aside.
//
// Its parser (ParseHead, HeadEnd, ChunkScanner) is also the proxy's HTTP/1.1 fast-path parser,
// so both request paths refuse exactly the same shapes with the same response (WriteRejection).
package guard

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Rejection is a refused request head: the status and the reason sent to the client.
type Rejection struct {
	Status int
	Reason string
}

// Error implements error.
func (r *Rejection) Error() string { return fmt.Sprintf("refuse request: %d %s", r.Status, r.Reason) }

// Listener wraps every accepted connection in a Conn.
type Listener struct {
	net.Listener
	// MaxHeaderBytes bounds a request head; larger heads get 431.
	MaxHeaderBytes int
	// OnReject, when set, is told about every refused head (for metrics and logs).
	OnReject func(remote net.Addr, r *Rejection)
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c, l.MaxHeaderBytes, l.OnReject), nil
}

type state int

const (
	stHead state = iota
	stBody
	stChunked
	stPass
	stRejected
)

// Conn is a net.Conn whose reads are screened. A refused head is never handed to the server:
// Read reports EOF instead and the error response is written when the server closes the
// connection, after any response it is still writing.
type Conn struct {
	net.Conn
	max      int
	onReject func(net.Addr, *Rejection)

	st        state
	head      []byte
	parsed    Head
	chunk     ChunkScanner
	remaining int64
	out       []byte
	buf       []byte
	rejection *Rejection
	closeOnce sync.Once
	active    atomic.Bool
}

// SetActive tells the conn whether the server is inside a request (http.StateActive). While it
// is, a refused head that follows is not reported as EOF yet, because the server would take EOF
// as the client leaving and cancel the request in progress; wire it to http.Server.ConnState.
func (c *Conn) SetActive(on bool) { c.active.Store(on) }

// Wrap screens c; maxHeader <= 0 means 64 KiB.
func Wrap(c net.Conn, maxHeader int, onReject func(net.Addr, *Rejection)) *Conn {
	if maxHeader <= 0 {
		maxHeader = 64 << 10
	}
	return &Conn{Conn: c, max: maxHeader, onReject: onReject}
}

// Read implements net.Conn.
func (c *Conn) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.st == stRejected {
			// Park the server's background read (it aborts it with a deadline when the request
			// ends); bytes the client sends after a refused head are dropped.
			for c.active.Load() {
				if _, err := c.Conn.Read(c.buf); err != nil {
					return 0, err
				}
			}
			return 0, io.EOF
		}
		if c.buf == nil {
			c.buf = make([]byte, 16<<10)
		}
		n, err := c.Conn.Read(c.buf)
		if n > 0 {
			if rej := c.feed(c.buf[:n]); rej != nil {
				c.reject(rej)
				if len(c.out) == 0 {
					return 0, io.EOF
				}
			}
		}
		if err != nil && len(c.out) == 0 {
			return 0, err
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	if len(c.out) == 0 {
		c.out = c.out[:0:0]
	}
	return n, nil
}

func (c *Conn) reject(r *Rejection) {
	c.st = stRejected
	c.rejection = r
	if c.onReject != nil {
		c.onReject(c.RemoteAddr(), r)
	}
}

// Close writes a pending refusal, then closes the connection.
func (c *Conn) Close() error {
	c.closeOnce.Do(func() {
		if r := c.rejection; r != nil {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			WriteRejection(c.Conn, r)
		}
	})
	return c.Conn.Close()
}

// WriteRejection writes the refusal response (which closes the connection) to w. The guard and
// the proxy's fast path answer refused heads with these same bytes.
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

var h2Preface = []byte("PRI * HTTP/2.0\r\n")

// feed runs the framing state machine over data, appending the bytes the server may see to out.
func (c *Conn) feed(data []byte) *Rejection {
	for len(data) > 0 {
		switch c.st {
		case stPass:
			c.out = append(c.out, data...)
			return nil
		case stHead:
			if len(c.head) == 0 {
				// Empty lines before a request line are allowed (RFC 9112 2.2).
				for len(data) > 0 && (data[0] == '\r' || data[0] == '\n') {
					c.out = append(c.out, data[0])
					data = data[1:]
				}
				if len(data) == 0 {
					return nil
				}
			}
			from := len(c.head) - 3
			if from < 0 {
				from = 0
			}
			c.head = append(c.head, data...)
			data = nil
			if len(c.head) >= len(h2Preface) && bytes.HasPrefix(c.head, h2Preface) {
				c.out = append(c.out, c.head...)
				c.head = nil
				c.st = stPass
				return nil
			}
			end := HeadEnd(c.head, from)
			if end < 0 {
				if len(c.head) > c.max {
					return &Rejection{431, "request header fields too large"}
				}
				return nil
			}
			if end > c.max {
				return &Rejection{431, "request header fields too large"}
			}
			if rej := ParseHead(c.head[:end], &c.parsed); rej != nil {
				return rej
			}
			next := c.next(&c.parsed)
			c.out = append(c.out, c.head[:end]...)
			data = append([]byte(nil), c.head[end:]...)
			c.head = c.head[:0]
			c.st = next
		case stBody:
			n := int64(len(data))
			if n > c.remaining {
				n = c.remaining
			}
			c.out = append(c.out, data[:n]...)
			data = data[n:]
			c.remaining -= n
			if c.remaining == 0 {
				c.st = stHead
			}
		case stChunked:
			n, done, rej := c.chunk.Scan(data)
			c.out = append(c.out, data[:n]...)
			data = data[n:]
			if rej != nil {
				return rej
			}
			if done {
				c.st = stHead
			}
		}
	}
	return nil
}

// HeadEnd returns the length of the head at the start of b (through the blank line that ends
// it), or -1 when b does not hold a whole head yet; the search starts at offset from, so a caller
// that appends data can resume where it stopped (from = previous length - 3).
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
	// Line is the first line (request line or status line) without its line ending.
	Line []byte
	// Fields are the header fields in order, values trimmed of surrounding whitespace.
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

// ParseHead parses and screens one head (which must end with its blank line, see HeadEnd) into
// h. It refuses the shapes a proxy must not forward: Content-Length together with
// Transfer-Encoding, duplicate or invalid Content-Length, a Transfer-Encoding not ending in
// chunked, obsolete line folding and invalid header names. The first line is left to the caller.
func ParseHead(head []byte, h *Head) *Rejection {
	h.Line, h.Fields, h.ContentLength, h.Chunked, h.TransferEncoding, h.Upgrade = nil, h.Fields[:0], -1, false, nil, false
	var cl []byte
	ncl, nte := 0, 0
	first := true
	for len(head) > 0 {
		var l []byte
		if i := bytes.IndexByte(head, '\n'); i >= 0 {
			l, head = head[:i], head[i+1:]
		} else {
			l, head = head, nil
		}
		l = bytes.TrimSuffix(l, []byte("\r"))
		if first {
			h.Line, first = l, false
			continue
		}
		if len(l) == 0 {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			return &Rejection{400, "obsolete line folding is not allowed (RFC 9112 5.2)"}
		}
		colon := bytes.IndexByte(l, ':')
		if colon <= 0 {
			return &Rejection{400, "invalid header line"}
		}
		name := l[:colon]
		for _, ch := range name {
			if !isTokenChar(ch) {
				return &Rejection{400, fmt.Sprintf("invalid header name %q", name)}
			}
		}
		value := bytes.TrimSpace(l[colon+1:])
		h.Fields = append(h.Fields, Field{name, value})
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			cl = value
			ncl++
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if nte == 0 {
				h.TransferEncoding = value
			} else {
				// Rare: several fields; join them once (allocation only on this path).
				h.TransferEncoding = append(append(append([]byte(nil), h.TransferEncoding...), ','), value...)
			}
			nte++
		case bytes.EqualFold(name, []byte("Upgrade")):
			h.Upgrade = true
		}
	}
	if ncl > 0 && nte > 0 {
		return &Rejection{400, "Content-Length together with Transfer-Encoding"}
	}
	if ncl > 1 {
		return &Rejection{400, "duplicate Content-Length"}
	}
	switch {
	case nte > 0:
		// Only "chunked" as the final coding frames a request; anything else the server refuses.
		if !endsWithChunked(h.TransferEncoding) {
			return &Rejection{400, "Transfer-Encoding must end with chunked"}
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

// next is the framing state for what follows a screened head.
func (c *Conn) next(h *Head) state {
	switch {
	case h.Upgrade:
		// After an upgrade the bytes are another protocol; the server hijacks the connection.
		return stPass
	case h.Chunked:
		c.chunk = ChunkScanner{line: c.chunk.line[:0]}
		return stChunked
	case h.ContentLength > 0:
		c.remaining = h.ContentLength
		return stBody
	}
	return stHead
}

// ChunkScanner follows the framing of a chunked body (RFC 9112 7.1) without decoding it, so a
// proxy can pass the body on byte for byte and still know where it ends. The zero value is ready
// for a new body.
type ChunkScanner struct {
	st        int // chunkSize, chunkData or chunkTrailer
	remaining int64
	line      []byte
}

const (
	chunkSize = iota
	chunkData
	chunkTrailer
)

// Scan consumes the bytes at the start of p that belong to the body and returns how many did.
// done reports that the body (with its trailer section) ended at p[n-1]; the scanner is then
// reset for the next body. A malformed chunk line is refused.
func (s *ChunkScanner) Scan(p []byte) (n int, done bool, rej *Rejection) {
	for n < len(p) {
		if s.st == chunkData {
			k := int64(len(p) - n)
			if k > s.remaining {
				k = s.remaining
			}
			n += int(k)
			s.remaining -= k
			if s.remaining == 0 {
				s.st = chunkSize
			}
			continue
		}
		i := bytes.IndexByte(p[n:], '\n')
		if i < 0 {
			s.line = append(s.line, p[n:]...)
			n = len(p)
			if len(s.line) > 4096 {
				return n, false, &Rejection{400, "chunk line too long"}
			}
			return n, false, nil
		}
		s.line = append(s.line, p[n:n+i+1]...)
		n += i + 1
		line := bytes.TrimRight(s.line, "\r\n")
		s.line = s.line[:0]
		if s.st == chunkTrailer {
			if len(line) == 0 {
				s.st = chunkSize
				return n, true, nil
			}
			continue
		}
		if len(line) == 0 {
			continue // the CRLF that ends the previous chunk's data
		}
		if j := bytes.IndexByte(line, ';'); j >= 0 {
			line = line[:j]
		}
		size, ok := parseHex(bytes.TrimSpace(line))
		if !ok {
			return n, false, &Rejection{400, "invalid chunk size"}
		}
		if size == 0 {
			s.st = chunkTrailer
		} else {
			s.remaining = size
			s.st = chunkData
		}
	}
	return n, false, nil
}

// parseHex parses a chunk size: hex digits only, at most 15 of them (no overflow).
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		var d byte
		switch {
		case ch >= '0' && ch <= '9':
			d = ch - '0'
		case ch >= 'a' && ch <= 'f':
			d = ch - 'a' + 10
		case ch >= 'A' && ch <= 'F':
			d = ch - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}

func endsWithChunked(te []byte) bool {
	last := te
	if i := bytes.LastIndexByte(te, ','); i >= 0 {
		last = te[i+1:]
	}
	last = bytes.TrimSpace(last)
	return bytes.EqualFold(last, []byte("chunked"))
}

// isTokenChar reports whether ch may appear in a header name (RFC 9110 5.6.2 tchar).
func isTokenChar(ch byte) bool {
	switch {
	case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", ch) >= 0
}
