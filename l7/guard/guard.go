// Package guard screens HTTP/1.1 request heads on a connection before the HTTP server parses
// them, refusing request-smuggling shapes that Go's server would otherwise accept by picking one
// interpretation: Content-Length together with Transfer-Encoding, duplicate or invalid
// Content-Length, obsolete line folding, and invalid header names. A proxy must refuse these,
// because the backend may pick the other interpretation and see a second, hidden request.
//
// The guard follows message framing (Content-Length and chunked bodies) so it inspects every head
// of a keep-alive connection, not just the first. Bodies pass through untouched; after an upgrade
// request or the HTTP/2 preface it steps aside.
package guard

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
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
	stChunkSize
	stChunkData
	stTrailer
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
	line      []byte
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
			body := r.Reason + "\n"
			fmt.Fprintf(c.Conn, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
				r.Status, statusText(r.Status), len(body), body)
		}
	})
	return c.Conn.Close()
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
			end := headEnd(c.head, from)
			if end < 0 {
				if len(c.head) > c.max {
					return &Rejection{431, "request header fields too large"}
				}
				return nil
			}
			if end > c.max {
				return &Rejection{431, "request header fields too large"}
			}
			next, rej := c.inspect(c.head[:end])
			if rej != nil {
				return rej
			}
			c.out = append(c.out, c.head[:end]...)
			data = append([]byte(nil), c.head[end:]...)
			c.head = c.head[:0]
			c.st = next
		case stBody, stChunkData:
			n := int64(len(data))
			if n > c.remaining {
				n = c.remaining
			}
			c.out = append(c.out, data[:n]...)
			data = data[n:]
			c.remaining -= n
			if c.remaining == 0 {
				if c.st == stBody {
					c.st = stHead
				} else {
					c.st = stChunkSize
				}
			}
		case stChunkSize, stTrailer:
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				c.line = append(c.line, data...)
				c.out = append(c.out, data...)
				if len(c.line) > 4096 {
					return &Rejection{400, "chunk line too long"}
				}
				return nil
			}
			c.line = append(c.line, data[:i+1]...)
			c.out = append(c.out, data[:i+1]...)
			data = data[i+1:]
			line := bytes.TrimRight(c.line, "\r\n")
			c.line = c.line[:0]
			if c.st == stTrailer {
				if len(line) == 0 {
					c.st = stHead
				}
				continue
			}
			if len(line) == 0 {
				continue // the CRLF that ends the previous chunk's data
			}
			if j := bytes.IndexByte(line, ';'); j >= 0 {
				line = line[:j]
			}
			size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
			if err != nil || size < 0 {
				return &Rejection{400, "invalid chunk size"}
			}
			if size == 0 {
				c.st = stTrailer
			} else {
				c.remaining = size
				c.st = stChunkData
			}
		}
	}
	return nil
}

// headEnd finds the end of a head (the blank line), searching from offset from.
func headEnd(b []byte, from int) int {
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

// inspect checks one head and returns the state for what follows it.
func (c *Conn) inspect(head []byte) (state, *Rejection) {
	lines := bytes.Split(head, []byte("\n"))
	var cl []string
	te, upgrade := "", false
	for i, raw := range lines {
		if i == 0 {
			continue // the request line is the server's to judge
		}
		l := bytes.TrimSuffix(raw, []byte("\r"))
		if len(l) == 0 {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			return 0, &Rejection{400, "obsolete line folding is not allowed (RFC 9112 5.2)"}
		}
		colon := bytes.IndexByte(l, ':')
		if colon <= 0 {
			return 0, &Rejection{400, "invalid header line"}
		}
		name := l[:colon]
		for _, ch := range name {
			if !isTokenChar(ch) {
				return 0, &Rejection{400, fmt.Sprintf("invalid header name %q", name)}
			}
		}
		value := string(bytes.TrimSpace(l[colon+1:]))
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			cl = append(cl, value)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			if te != "" {
				te += ","
			}
			te += value
		case bytes.EqualFold(name, []byte("Upgrade")):
			upgrade = true
		}
	}
	if len(cl) > 0 && te != "" {
		return 0, &Rejection{400, "Content-Length together with Transfer-Encoding"}
	}
	if len(cl) > 1 {
		return 0, &Rejection{400, "duplicate Content-Length"}
	}
	next := stHead
	switch {
	case te != "":
		// Only "chunked" as the final coding frames a request; anything else the server refuses.
		if !endsWithChunked(te) {
			return 0, &Rejection{400, "Transfer-Encoding must end with chunked"}
		}
		next = stChunkSize
	case len(cl) == 1:
		n, err := strconv.ParseInt(cl[0], 10, 64)
		if err != nil || n < 0 || cl[0] == "" || cl[0][0] == '+' {
			return 0, &Rejection{400, fmt.Sprintf("invalid Content-Length %q", cl[0])}
		}
		if n > 0 {
			c.remaining = n
			next = stBody
		}
	}
	if upgrade {
		// After an upgrade the bytes are another protocol; the server hijacks the connection.
		next = stPass
	}
	return next, nil
}

func endsWithChunked(te string) bool {
	parts := bytes.Split([]byte(te), []byte(","))
	last := bytes.TrimSpace(parts[len(parts)-1])
	return bytes.EqualFold(last, []byte("chunked"))
}

// isTokenChar reports whether ch may appear in a header name (RFC 9110 5.6.2 tchar).
func isTokenChar(ch byte) bool {
	switch {
	case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9':
		return true
	}
	return bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), ch) >= 0
}
