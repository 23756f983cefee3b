package edge

import (
	"errors"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// Client connection limits. Without a cap, an edge at its descriptor limit keeps accepting (the
// kernel completes handshakes into the backlog) but cannot serve: accept fails with EMFILE, and
// the descriptors its disk tier and origin fetches need are gone too. So the client listener
// admits at most max_connections (by default the descriptor limit minus a reserve for origin
// connections, disk files and listeners); one over the cap gets a 503 and is closed at once. The
// rule is the L7 tier's (l7/conns.go), rebuilt here because edge/ imports nothing from l7/.

// connLimit counts open client connections against the cap.
type connLimit struct {
	max     int64
	n       atomic.Int64
	refused *atomic.Int64
}

// connReserve is how many descriptors stay for everything but client connections: a quarter of
// the limit, at least 64.
func connReserve(limit uint64) uint64 { return max(64, limit/4) }

// connCap is the cap for a configured max_connections (0: automatic) under the process's
// current descriptor limit; a configured value above the room is lowered to it.
func connCap(configured int) int64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil || rl.Cur == 0 {
		return int64(configured)
	}
	room := int64(1)
	if r := connReserve(rl.Cur); rl.Cur > r {
		room = int64(rl.Cur - r)
	}
	if configured == 0 || int64(configured) > room {
		return room
	}
	return int64(configured)
}

// overloadAnswer is what a connection over the cap gets before it is closed.
var overloadAnswer = func() []byte {
	body := "service unavailable: too many connections; retry later\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"Retry-After: 1\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

// limitListener admits accepted connections through a connLimit; the ones over it are answered
// 503 and closed without reaching the server.
type limitListener struct {
	net.Listener
	lim *connLimit
}

// Accept returns the next admitted connection.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.lim.n.Add(1) <= l.lim.max || l.lim.max <= 0 {
			return &countedConn{Conn: c, lim: l.lim}, nil
		}
		l.lim.n.Add(-1)
		l.lim.refused.Add(1)
		go refuse(c)
	}
}

// refuse answers a connection over the cap and closes it, without waiting on a slow client.
func refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(overloadAnswer)
	c.Close()
}

// countedConn gives its place back when closed, whoever serves it (fast path or net/http), and
// resets a connection whose write timed out (see cutSlow).
type countedConn struct {
	net.Conn
	lim      *connLimit
	once     atomic.Bool
	timedOut atomic.Bool
}

// Write remembers a write that hit its deadline, so Close resets the connection.
func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.timedOut.Store(true)
	}
	return n, err
}

// Close closes the connection and ends its count once.
func (c *countedConn) Close() error {
	if c.once.CompareAndSwap(false, true) {
		c.lim.n.Add(-1)
	}
	if c.timedOut.Load() {
		cutSlow(c.Conn)
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

// rawConn returns the TCP connection under a countedConn, for writev (net.Buffers writes with one
// system call only to the net package's own connections).
func rawConn(c net.Conn) net.Conn {
	if cc, ok := c.(*countedConn); ok {
		return cc.Conn
	}
	return c
}

// CloseWrite half-closes a TCP connection (the fast path's linger and net/http use it).
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
