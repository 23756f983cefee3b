package edge

import (
	"errors"
	"net"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/switchyard/switchyard/internal/connlimit"
)

// Client connection limits. Without a cap, an edge at its descriptor limit keeps accepting (the
// kernel completes handshakes into the backlog) but cannot serve: accept fails with EMFILE, and
// the descriptors its disk tier and origin fetches need are gone too. So the client listener
// admits at most max_connections (by default the descriptor limit minus a reserve for origin
// connections, disk files and listeners); one over the cap gets a 503 and is closed at once. The
// rule and its counting are the L7 tier's (internal/connlimit); the edge adds the slow-reader
// reset (cutSlow).

// overloadAnswer is what a connection over the cap gets before it is closed.
var overloadAnswer = func() []byte {
	body := "service unavailable: too many connections; retry later\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// limitClients caps the client listener ln under the process's descriptor limit, counting
// refusals in refused.
func limitClients(ln net.Listener, maxConnections int, refused *atomic.Int64) (net.Listener, *connlimit.Budget) {
	b := connlimit.New(connlimit.Config{Limit: connlimit.NoFile(), MaxConnections: maxConnections, Answer: overloadAnswer})
	b.OnRefuse = func() { refused.Add(1) }
	return clientListener(ln, b), b
}

// clientListener admits ln's connections through b as client connections (the plain and the
// TLS listener share one budget).
func clientListener(ln net.Listener, b *connlimit.Budget) net.Listener {
	return &connlimit.Listener{Listener: ln, Budget: b, Wrap: func(c *connlimit.Conn) net.Conn { return &clientConn{Conn: c} }}
}

// clientConn is an admitted client connection (its place comes back when it closes, whoever
// serves it: fast path or net/http) that is reset when closed after a write timed out (see
// cutSlow).
type clientConn struct {
	*connlimit.Conn
	timedOut atomic.Bool
}

// Write remembers a write that hit its deadline, so Close resets the connection.
func (c *clientConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.timedOut.Store(true)
	}
	return n, err
}

// Close closes the connection (a reset after a timed-out write) and ends its count once.
func (c *clientConn) Close() error {
	if c.timedOut.Load() {
		cutSlow(c.Conn.Conn)
	}
	return c.Conn.Close()
}

// cutSlow makes the close of a connection whose write timed out a reset. A plain close leaves
// the unsent response (megabytes with autotuned buffers) queued in the kernel, still trickling to
// the slow reader long after the edge let go; a reset discards it, so the client is cut for real
// and the memory comes back.
func cutSlow(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
}

// rawConn returns the TCP connection under a clientConn, for writev (net.Buffers writes with one
// system call only to the net package's own connections).
func rawConn(c net.Conn) net.Conn {
	if cc, ok := c.(*clientConn); ok {
		return cc.Conn.Conn
	}
	return c
}
