package l7

import (
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/l7/core"
)

// Descriptor exhaustion must not take healthy backends down. A proxy that accepts clients until
// accept(2) fails with EMFILE has no descriptor left for its health checks and upstream
// connections: every check fails, every backend goes down, and keep-alive clients with pooled
// upstreams get 503. So the proxy raises its soft descriptor limit to the hard one at start,
// caps client connections (limits.max_connections) below it, keeps the rest as a reserve for
// upstreams, health checks, listeners and logs, and never counts a local resource failure
// (core.LocalResource) against a backend.

// connLimit counts open client connections against the cap; every engine admits through it.
type connLimit struct {
	max     int64
	n       atomic.Int64
	refused atomic.Int64
	onShed  func()
}

// fdReserve is how many descriptors stay for everything but client connections: a quarter of
// the limit, at least 64.
func fdReserve(limit uint64) uint64 { return max(64, limit/4) }

// raiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit and returns the limit in effect.
// The Go runtime does the same at start on Linux; doing it here too keeps the cap right when
// the limit was lowered since (or by an embedding program) and names the rule where it is used.
func raiseNoFile() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if rl.Cur < rl.Max {
		up := rl
		up.Cur = up.Max
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
			rl = up
		}
	}
	return rl.Cur
}

// connCap is the client connection cap for a configured max_connections (0: automatic) under a
// descriptor limit; limit 0 (unknown) leaves the configured value as it is.
func connCap(configured int, limit uint64) int64 {
	if limit == 0 {
		return int64(configured)
	}
	room := int64(0)
	if r := fdReserve(limit); limit > r {
		room = int64(limit - r)
	}
	if configured == 0 || int64(configured) > room {
		return max(room, 1)
	}
	return int64(configured)
}

// admit counts a new client connection; false means it is over the cap (not counted).
func (l *connLimit) admit() bool {
	if l.max > 0 && l.n.Add(1) > l.max {
		l.n.Add(-1)
		l.refused.Add(1)
		if l.onShed != nil {
			l.onShed()
		}
		return false
	}
	if l.max <= 0 {
		l.n.Add(1)
	}
	return true
}

// done ends a connection admit counted.
func (l *connLimit) done() { l.n.Add(-1) }

// overloadAnswer is what a connection over the cap gets before it is closed.
var overloadAnswer = core.ErrorResponse(nil, 503, "overloaded (connection limit); retry later", core.ShedHeaders, true)

// refuse answers a connection over the cap with 503 and closes it, without waiting for it.
func (l *connLimit) refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(overloadAnswer)
	c.Close()
}

// countedConn ends its connection's count when closed (a connection handed to net/http).
type countedConn struct {
	net.Conn
	n    *connLimit
	once atomic.Bool
}

func (c *countedConn) Close() error {
	if c.once.CompareAndSwap(false, true) {
		c.n.done()
	}
	return c.Conn.Close()
}
