//go:build linux

package l7

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// TLS on the event loops. crypto/tls needs a net.Conn, and this VM's kernel has no `tls` ULP
// for kernel TLS, so TLS HTTP/1.1 connections were served by the goroutine engine: per request
// a read that found nothing (EAGAIN) before each of the two real reads, an idle-connection peek,
// and a goroutine parked and woken on Go's poller twice (futex, nanosleep), 7.7 system calls
// where the loop makes 4.2 (docs/measurements/l7.md, "Where the CPU goes"). So the TLS connection runs over a tlsWire:
// a net.Conn that, while a goroutine serves the connection, is the socket on Go's poller, and
// once a loop has taken the descriptor over is a pair of memory buffers. The loop reads
// ciphertext from the socket into the wire and lets crypto/tls decrypt it; what crypto/tls
// writes lands in the connection's send buffer (loopConn.pend), which the loop writes out as it
// does for plain HTTP: one write(2) per response, whatever the number of records.
//
// crypto/tls keeps going after an error from its net.Conn only if the error is temporary
// (readRecordOrCCS), which wouldBlock is. The handshake still happens on a goroutine, on Go's
// poller (an error there is final, so it cannot be resumed), and so does the connection's first
// request: a connection that makes one request and closes (a full handshake each, the tlscps
// cell) costs what it did before, with no hop between threads. When the connection stays open
// after that first response, the goroutine hands it to a loop (tlsToLoop), with what crypto/tls
// has already buffered inside the tls.Conn. (So a TLS connection's first request takes an
// upstream connection of the goroutine engine's pool, the rest the loop's.)

// tlsWire is the net.Conn under a TLS connection (see above).
type tlsWire struct {
	conn         net.Conn // the socket on Go's poller; nil while a loop owns the descriptor
	laddr, raddr net.Addr
	lc           *loopConn // the loop's connection while it owns the descriptor
	buf          []byte    // ciphertext the loop read, buf[r:w] not yet taken by crypto/tls
	r, w         int
	eof          bool // the loop read the end of the stream
}

// newTLSWire wraps an accepted socket for tls.Server so that a loop can take it over later.
func newTLSWire(c net.Conn) net.Conn {
	if _, ok := c.(*net.TCPConn); !ok {
		return c // only TCP sockets move to a loop
	}
	return &tlsWire{conn: c, laddr: c.LocalAddr(), raddr: c.RemoteAddr()}
}

// wouldBlock is what a loop-owned wire returns when crypto/tls needs more ciphertext than the
// loop has read: temporary, so crypto/tls does not keep it as the connection's error.
type wouldBlock struct{}

func (wouldBlock) Error() string   { return "tls wire: no more ciphertext read yet" }
func (wouldBlock) Timeout() bool   { return false }
func (wouldBlock) Temporary() bool { return true }

func (w *tlsWire) Read(p []byte) (int, error) {
	if w.r < w.w {
		n := copy(p, w.buf[w.r:w.w])
		w.r += n
		return n, nil
	}
	if w.lc == nil {
		return w.conn.Read(p)
	}
	if w.eof {
		return 0, io.EOF
	}
	return 0, wouldBlock{}
}

func (w *tlsWire) Write(p []byte) (int, error) {
	if w.lc == nil {
		return w.conn.Write(p)
	}
	w.lc.pend = append(w.lc.pend, p...)
	return len(p), nil
}

// Close closes the socket on Go's poller; a loop closes its descriptor itself.
func (w *tlsWire) Close() error {
	if w.lc == nil {
		return w.conn.Close()
	}
	return nil
}

func (w *tlsWire) LocalAddr() net.Addr  { return w.laddr }
func (w *tlsWire) RemoteAddr() net.Addr { return w.raddr }

// The deadlines apply on Go's poller; on a loop the loop enforces its own.
func (w *tlsWire) SetDeadline(t time.Time) error {
	if w.lc == nil {
		return w.conn.SetDeadline(t)
	}
	return nil
}

func (w *tlsWire) SetReadDeadline(t time.Time) error {
	if w.lc == nil {
		return w.conn.SetReadDeadline(t)
	}
	return nil
}

func (w *tlsWire) SetWriteDeadline(t time.Time) error {
	if w.lc == nil {
		return w.conn.SetWriteDeadline(t)
	}
	return nil
}

// fill reads ciphertext from the loop's socket once, like readInto. n == 0 with a nil error:
// wait for epoll (or the end of the stream was read: w.eof).
func (w *tlsWire) fill(fd int, ready *bool, hup bool) (int, error) {
	if w.r == w.w {
		w.r, w.w = 0, 0
	}
	if w.buf == nil {
		w.buf = make([]byte, 16<<10+5+256) // one whole record of the largest size
	} else if w.w == len(w.buf) {
		w.w = copy(w.buf, w.buf[w.r:w.w])
		w.r = 0
	}
	space := len(w.buf) - w.w
	n, err := rawRead(fd, w.buf[w.w:])
	switch {
	case err == unix.EAGAIN:
		*ready = false
		return 0, nil
	case err != nil:
		return 0, err
	case n == 0:
		w.eof = true
		return 0, nil
	}
	if n < space && !hup {
		*ready = false
	}
	w.w += n
	return n, nil
}

// readTLS decrypts what the socket and crypto/tls have into c.in, reading the socket while it
// may have more; it returns the plaintext bytes added (0 with a nil error: wait for epoll).
func (c *loopConn) readTLS(limit int) (int, error) {
	if err := c.in.MakeRoom(limit); err != nil {
		return 0, err
	}
	total := 0
	for c.in.W < len(c.in.Buf) {
		n, err := c.tls.Read(c.in.Buf[c.in.W:])
		c.in.W += n
		total += n
		var wb wouldBlock
		switch {
		case err == nil:
		case errors.As(err, &wb):
			if !c.readable {
				return total, nil
			}
			if _, ferr := c.wire.fill(c.fd, &c.readable, c.hup); ferr != nil {
				if total > 0 {
					c.readable = true // the error comes back on the next read
					return total, nil
				}
				return 0, ferr
			}
		case total > 0:
			// Plaintext and an error together, such as a request and the close_notify after
			// it: the request first. crypto/tls keeps the error and returns it on the next
			// read, which no socket event may ever prompt (close_notify comes without a FIN).
			c.readable = true
			return total, nil
		default:
			return 0, err
		}
	}
	// The buffer is full: crypto/tls may hold more, so read again before waiting for epoll.
	c.readable = true
	return total, nil
}

// sendTLS encrypts b into the send buffer (through the wire) and writes what it can.
func (c *loopConn) sendTLS(b []byte) {
	if _, err := c.tls.Write(b); err != nil {
		c.gone = true
		return
	}
	c.flush()
}

// closeNotify sends a TLS close_notify alert before a graceful close, as far as the socket
// takes it at once.
func (c *loopConn) closeNotify() {
	if c.gone || len(c.pend) > 0 {
		return
	}
	if c.tls.CloseWrite() == nil && len(c.pend) > 0 {
		_, _ = rawWrite(c.fd, c.pend)
	}
	c.pend = c.pend[:0]
}

// tlsToLoop hands a TLS connection the goroutine engine serves to an event loop, at a request
// boundary with no request bytes buffered; it reports whether the loop took it (the goroutine
// then forgets the connection without closing it). It does not when the loops are off
// (event_loops: -1), the server is shutting down, or a loop handed the connection over (pinned).
func (s *Server) tlsToLoop(gc *goConn) bool {
	tc, ok := gc.c.(*tls.Conn)
	if !ok || gc.pinned || len(gc.in.Buffered()) > 0 || s.noLoops || s.shutting.Load() {
		return false
	}
	w, ok := tc.NetConn().(*tlsWire)
	if !ok || w.lc != nil || w.r < w.w {
		return false
	}
	// A server with only TLS listeners starts its loops here (event_loops: -1 keeps them off).
	if !s.startLoops() {
		return false
	}
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	sc, ok := w.conn.(*net.TCPConn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	nfd := -1
	_ = rc.Control(func(fd uintptr) { nfd, err = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) })
	if err != nil || nfd < 0 {
		return false
	}
	_ = unix.SetNonblock(nfd, true)
	// Off Go's poller (closing the original descriptor takes it off Go's epoll; the duplicate
	// keeps the socket open) and onto the loop's.
	_ = w.conn.SetDeadline(time.Time{})
	w.conn.Close()
	l := loops[int(s.loopNext.Add(1))%len(loops)]
	s.pending.Add(1) // counted while between engines, so that Shutdown waits for it
	if !l.post(func() { s.pending.Add(-1); l.adoptTLS(nfd, gc.clientConn, tc, w) }) {
		s.pending.Add(-1)
		unix.Close(nfd) // the loops have stopped: the server is shutting down
		l.s.conns.Done()
	}
	return true
}

// adoptTLS starts serving, on this loop, a TLS connection a goroutine served until now.
func (l *evLoop) adoptTLS(nfd int, cc *clientConn, tc *tls.Conn, w *tlsWire) {
	if l.s.shutting.Load() {
		unix.Close(nfd)
		l.s.conns.Done()
		return
	}
	c := &loopConn{clientConn: cc, l: l, fd: nfd, readable: true, writable: true, tls: tc, wire: w}
	w.lc, w.conn = c, nil
	cc.w, cc.in.Conn = c, nil
	l.register(c)
}

// tlsToGoroutine gives a loop's TLS connection back to a goroutine: its wire is the socket on
// Go's poller (nc, a duplicate of the loop's descriptor) again, with the ciphertext the loop
// read and crypto/tls has not taken still in front.
func (c *loopConn) tlsToGoroutine(nc net.Conn) net.Conn {
	c.wire.conn, c.wire.lc = nc, nil
	return c.tls
}
