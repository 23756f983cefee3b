package h1

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The guard screens HTTP/1.1 connections before Go's net/http server parses them, refusing the
// request-smuggling shapes that server would otherwise accept by picking one interpretation
// (see ParseHead) and every chunked body that is not strictly RFC 9112 (see Chunked). A proxy
// must refuse these, because the next hop may pick the other interpretation and see a second,
// hidden request.
//
// It follows message framing (Content-Length and chunked bodies) so it inspects every head of a
// keep-alive connection, not just the first. Bodies it has checked pass on unchanged (net/http
// decodes them and re-frames what it forwards); after an upgrade request or the HTTP/2 preface
// it steps aside. The head of a chunked request is held back until its body has been checked
// (up to holdChunked bytes), so a malformed body is refused before the server, and so the
// next hop, sees any of the request; a longer body streams, and malformed framing further on
// fails the server's body read (the server answers that request and closes).

// GuardListener wraps every accepted connection in a GuardConn.
type GuardListener struct {
	net.Listener
	// MaxHeaderBytes bounds a request head; larger heads get 431.
	MaxHeaderBytes int
	// OnReject, when set, is told about every refused head (for metrics and logs).
	OnReject func(remote net.Addr, r *Rejection)
}

// Accept implements net.Listener.
func (l *GuardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Guard(c, l.MaxHeaderBytes, l.OnReject), nil
}

type guardState int

const (
	stHead guardState = iota
	stBody
	stChunked
	stPass
	stRejected
)

// GuardConn is a net.Conn whose reads are screened. A refused head is never handed to the
// server: Read reports EOF instead and the error response is written when the server closes
// the connection, after any response it is still writing.
type GuardConn struct {
	net.Conn
	max      int
	onReject func(net.Addr, *Rejection)

	st        guardState
	head      []byte
	parsed    Head
	chunk     Chunked
	remaining int64
	out       []byte
	buf       []byte
	rejection *Rejection
	held      []byte // a chunked request's head and the body checked so far, not yet released
	holding   bool
	midBody   bool // the refusal came inside a body the server is reading already
	closeOnce sync.Once
	active    atomic.Bool
}

// NetConn is the connection the guard reads (the TLS state of a request is found through it).
func (g *GuardConn) NetConn() net.Conn { return g.Conn }

// SetActive tells the conn whether the server is inside a request (http.StateActive). While it
// is, a refused head that follows is not reported as EOF yet, because the server would take EOF
// as the client leaving and cancel the request in progress; wire it to http.Server.ConnState.
func (c *GuardConn) SetActive(on bool) { c.active.Store(on) }

// Guard screens c; maxHeader <= 0 means 64 KiB.
func Guard(c net.Conn, maxHeader int, onReject func(net.Addr, *Rejection)) *GuardConn {
	if maxHeader <= 0 {
		maxHeader = 64 << 10
	}
	return &GuardConn{Conn: c, max: maxHeader, onReject: onReject}
}

// Read implements net.Conn.
func (c *GuardConn) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.st == stRejected && c.midBody {
			return 0, c.rejection // the server's body read fails; it answers and closes
		}
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

func (c *GuardConn) reject(r *Rejection) {
	c.st = stRejected
	c.rejection = r
	if c.onReject != nil {
		c.onReject(c.RemoteAddr(), r)
	}
}

// Close writes a pending refusal, then closes the connection.
func (c *GuardConn) Close() error {
	c.closeOnce.Do(func() {
		if r := c.rejection; r != nil && !c.midBody {
			_ = c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
			WriteRejection(c.Conn, r)
		}
	})
	return c.Conn.Close()
}

var h2Preface = []byte("PRI * HTTP/2.0\r\n")

// holdChunked bounds the chunked request bytes held back until the body is checked.
const holdChunked = 64 << 10

// feed runs the framing state machine over data, appending the bytes the server may see to out.
func (c *GuardConn) feed(data []byte) *Rejection {
	for len(data) > 0 {
		switch c.st {
		case stPass:
			c.out = append(c.out, data...)
			return nil
		case stHead:
			var rej *Rejection
			if data, rej = c.feedHead(data); rej != nil {
				return rej
			}
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
			n, done, rej := c.chunk.Check(data)
			if c.holding {
				c.held = append(c.held, data[:n]...)
			} else {
				c.out = append(c.out, data[:n]...)
			}
			data = data[n:]
			if rej != nil {
				c.midBody = !c.holding
				c.held, c.holding = c.held[:0], false
				return rej
			}
			if done || (c.holding && len(c.held) > holdChunked) {
				c.out = append(c.out, c.held...)
				c.held, c.holding = c.held[:0], false
			}
			if done {
				c.st = stHead
			}
		}
	}
	return nil
}

// feedHead collects a head; once it is whole and screened it is released with the state for
// what follows, and the bytes after it are returned.
func (c *GuardConn) feedHead(data []byte) ([]byte, *Rejection) {
	if len(c.head) == 0 {
		// Empty lines before a request line are allowed (RFC 9112 2.2).
		for len(data) > 0 && (data[0] == '\r' || data[0] == '\n') {
			c.out = append(c.out, data[0])
			data = data[1:]
		}
		if len(data) == 0 {
			return nil, nil
		}
	}
	from := max(len(c.head)-3, 0)
	c.head = append(c.head, data...)
	if len(c.head) >= len(h2Preface) && bytes.HasPrefix(c.head, h2Preface) {
		c.out = append(c.out, c.head...)
		c.head = nil
		c.st = stPass
		return nil, nil
	}
	end := HeadEnd(c.head, from)
	if end < 0 {
		if len(c.head) > c.max {
			return nil, ErrHeadTooLong
		}
		return nil, nil
	}
	if end > c.max {
		return nil, ErrHeadTooLong
	}
	if rej := ParseHead(c.head[:end], &c.parsed); rej != nil {
		return nil, rej
	}
	c.st = c.next(&c.parsed)
	if c.st == stChunked && !expects(&c.parsed) {
		c.held, c.holding = append(c.held[:0], c.head[:end]...), true
	} else {
		c.out = append(c.out, c.head[:end]...)
	}
	rest := append([]byte(nil), c.head[end:]...)
	c.head = c.head[:0]
	return rest, nil
}

// next is the framing state for what follows a screened head.
func (c *GuardConn) next(h *Head) guardState {
	switch {
	case h.Upgrade:
		// After an upgrade the bytes are another protocol; the server hijacks the connection.
		return stPass
	case h.Chunked:
		c.chunk = Chunked{}
		return stChunked
	case h.ContentLength > 0:
		c.remaining = h.ContentLength
		return stBody
	}
	return stHead
}

// expects reports an Expect field: that client waits for an interim answer before it sends the
// body, so its head cannot be held back until the body is checked.
func expects(h *Head) bool {
	for _, f := range h.Fields {
		if bytes.EqualFold(f.Name, []byte("Expect")) {
			return true
		}
	}
	return false
}
