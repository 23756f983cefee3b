package fastpath

import (
	"bytes"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// Lending one request to net/http. Misses, revalidations, stale entries, ranges and the other
// requests a fresh memory hit does not answer are served on the fast connection itself
// (fastmiss.go). What is lent is only what net/http's reading is the reference for, without
// a body: a target not in origin form (absolute form, "*"), a Host missing, repeated or not plain
// (h1.PlainHost), several Connection fields, a target url.ParseRequestURI refuses (the
// rules in fastConn.ownable). net/http answers that one request (often a 400) and, when it
// keeps the connection, it comes back to the fast path. Requests with a body, Expect, Upgrade
// and HTTP/1.0 are not lent: they are handed over for good (fast.go).
//
// The net/http server is given a lentConn that reads back exactly the request's head and then
// ends the connection: net/http parses the head, runs the handler (its background read blocks
// in Read), finishes the response and aborts that read by setting a read deadline in the past
// (http.connReader.abortPendingRead), which marks the response complete on the wire. Its next
// read, for the next request, gets EOF, so it closes the lentConn, and Close hands the client
// connection back. When net/http closes without asking for another request (Connection: close,
// a refused head, a handler that aborted), the connection is finished and the fast path closes
// it.

// lentConn is the client connection as net/http sees it for one lent request.
type lentConn struct {
	net.Conn // the client connection: writes, addresses and write deadlines go to it

	mu       sync.Mutex
	head     []byte        // the request head, not yet read by net/http
	deadline time.Time     // net/http's read deadline
	kick     chan struct{} // closed (and replaced) when the deadline changes
	answered bool          // a read was aborted after the head: the response is complete
	eof      bool          // net/http asked for the next request and got EOF

	once sync.Once
	back chan bool // true: the connection returns to the fast path; false: close it
}

// NetConn is the fast path's client connection (net/http finds its TLS state through it).
func (c *lentConn) NetConn() net.Conn { return c.Conn }

// newLentConn lends c for the request whose head is given.
func newLentConn(c net.Conn, head []byte) *lentConn {
	return &lentConn{Conn: c, head: head, kick: make(chan struct{}), back: make(chan bool, 1)}
}

// Read returns the head, then blocks until the read deadline passes (net/http's background
// read, aborted once the response is written), then reports EOF.
func (l *lentConn) Read(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.head) > 0 {
		n := copy(b, l.head)
		l.head = l.head[n:]
		return n, nil
	}
	for {
		if l.answered {
			l.eof = true
			return 0, io.EOF
		}
		d, kick := l.deadline, l.kick
		if !d.IsZero() && !time.Now().Before(d) {
			l.answered = true
			return 0, os.ErrDeadlineExceeded
		}
		l.mu.Unlock()
		var timer <-chan time.Time
		if !d.IsZero() {
			t := time.NewTimer(time.Until(d))
			timer = t.C
			select {
			case <-kick:
			case <-timer:
			}
			t.Stop()
		} else {
			<-kick
		}
		l.mu.Lock()
	}
}

// SetReadDeadline records net/http's read deadline and wakes a blocked Read.
func (l *lentConn) SetReadDeadline(t time.Time) error {
	l.mu.Lock()
	l.deadline = t
	close(l.kick)
	l.kick = make(chan struct{})
	l.mu.Unlock()
	return nil
}

// SetDeadline sets the read deadline here and the write deadline on the client connection.
func (l *lentConn) SetDeadline(t time.Time) error {
	l.SetReadDeadline(t)
	return l.Conn.SetWriteDeadline(t)
}

// CloseWrite half-closes the client connection (net/http's close after Connection: close).
func (l *lentConn) CloseWrite() error {
	if cw, ok := l.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Close ends the loan: the connection goes back to the fast path when net/http finished the
// response and asked for the next request, and is to be closed otherwise. The client connection
// itself stays open; the fast path owns it.
func (l *lentConn) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		keep := l.eof
		l.mu.Unlock()
		l.back <- keep
	})
	return nil
}

// lendable reports whether net/http may answer the parsed request alone and give the
// connection back: GET or HEAD over HTTP/1.1, no body and no framing field that could announce
// one, no Expect (net/http would read a body after its 100 Continue) and no Upgrade.
func (fc *fastConn) lendable() bool {
	h := &fc.head
	if !bytes.HasPrefix(h.Line, []byte("GET ")) && !bytes.HasPrefix(h.Line, []byte("HEAD ")) {
		return false
	}
	if !bytes.HasSuffix(h.Line, []byte(" HTTP/1.1")) {
		return false
	}
	if h.ContentLength > 0 || h.Chunked || h.TransferEncoding != nil || h.Upgrade {
		return false
	}
	for _, f := range h.Fields {
		if bytes.EqualFold(f.Name, []byte("Expect")) {
			return false
		}
	}
	return true
}

// lend has net/http answer the request whose head (end bytes) is buffered, and reports whether
// the connection came back for more requests. Bytes after the head (pipelined requests) stay in
// the fast path's buffer.
func (fc *fastConn) lend(end int) bool {
	head := append([]byte(nil), fc.in.Buffered()[:end]...)
	fc.in.Consume(end)
	fc.fs.cache.Lent()
	l := newLentConn(fc.c, head)
	if !fc.fs.fallback.Deliver(l) {
		return false
	}
	keep := <-l.back
	fc.wdeadline = time.Time{} // net/http moved the write deadline: re-arm it on the next hit
	return keep
}
