// Package connlimit bounds a stop's connections by its descriptor limit, for the L7 proxy (l7/)
// and the edge cache (edge/).
//
// A stop that opens sockets until socket(2) or accept(2) fails with EMFILE has no descriptor
// left for what keeps it healthy: health checks fail, every backend goes down, and clients that
// were being served get errors. So the limit is split in two. A reserve (Reserve: a quarter of
// the limit, at least 64) is never handed out by a Budget: it is for health checks, listeners,
// logs and files. The rest, the room, is shared by client connections and the upstream
// connections dialled for them (an HTTP/2 client may hold many upstream connections at once).
// Client connections are also capped by max_connections (by default half the room where upstream
// connections are counted, so that idle clients cannot starve served ones of upstream
// connections; the whole room where they are not). A client over the cap or past the
// room gets a 503 and is closed at once; an upstream dial past the room fails with ErrExhausted,
// which reads as EMFILE, so the stop sheds the request (503 with Retry-After) and never counts it
// against the backend.
package connlimit

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// ErrExhausted is the error of an upstream dial past the budget. It wraps syscall.EMFILE: for
// the caller it is the descriptor limit (reached early, so that the reserve stays), a local
// shortage and not the backend's fault.
var ErrExhausted = fmt.Errorf("descriptor budget exhausted: %w", syscall.EMFILE)

// Reserve is how many descriptors of a limit stay out of every Budget: a quarter of the limit,
// at least 64.
func Reserve(limit uint64) uint64 { return max(64, limit/4) }

// Room is the number of descriptors a limit leaves to client and upstream connections: the limit
// minus its reserve, at least 1; 0 (unbounded) when the limit is unknown (0).
func Room(limit uint64) int64 {
	if limit == 0 {
		return 0
	}
	if r := Reserve(limit); limit > r {
		return int64(limit - r)
	}
	return 1
}

// Cap is the client connection cap for a configured max_connections (0: automatic) under a
// descriptor limit: the room when automatic or configured above it. An unknown limit (0) leaves
// the configured value as it is.
func Cap(configured int, limit uint64) int64 {
	room := Room(limit)
	if room == 0 || (configured != 0 && int64(configured) <= room) {
		return int64(configured)
	}
	return room
}

// SharedCap is Cap for a stop that also counts its upstream connections in the room: the
// automatic cap is half the room, so that every admitted HTTP/1.1 client (which holds at most one
// upstream connection at a time) can still get one when idle clients flood the listener.
func SharedCap(configured int, limit uint64) int64 {
	if configured == 0 && limit > 0 {
		return max(Room(limit)/2, 1)
	}
	return Cap(configured, limit)
}

// NoFile returns the process's soft RLIMIT_NOFILE, 0 when unknown.
func NoFile() uint64 {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) != nil {
		return 0
	}
	return rl.Cur
}

// RaiseNoFile lifts the soft RLIMIT_NOFILE to the hard limit and returns the limit in effect.
// The Go runtime does the same at start on Linux; doing it again keeps the budget right when the
// limit was lowered since (or by an embedding program).
func RaiseNoFile() uint64 {
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

// Budget counts a stop's client and upstream connections against its descriptor room and its
// client cap. It is safe for concurrent use; set OnRefuse and OnShed before it is used.
type Budget struct {
	maxClients int64 // client cap; 0: unbounded
	room       int64 // clients and upstreams together; 0: unbounded
	answer     []byte
	clients    atomic.Int64
	total      atomic.Int64 // clients and upstreams
	// OnRefuse, when set, runs for each client connection refused over the cap or the room.
	OnRefuse func()
	// OnShed, when set, runs for each upstream dial refused past the room.
	OnShed func()
	// Reclaim, when set, runs when Take finds the room used up, to close idle upstream
	// connections (pooled ones hold descriptors too, and one engine's idle pool must not starve
	// another's dials); Take then tries once more. It runs at most once per ReclaimEvery.
	Reclaim     func()
	lastReclaim atomic.Int64 // unix nanoseconds
}

// ReclaimEvery is how often at most a Budget runs its Reclaim.
const ReclaimEvery = 50 * time.Millisecond

// Config is what a Budget is cut from.
type Config struct {
	// Limit is the descriptor limit; 0 (unknown) enforces nothing but a configured cap.
	Limit uint64
	// MaxConnections is the configured client cap (0: automatic, Cap or SharedCap).
	MaxConnections int
	// Upstreams: the stop counts its upstream connections too (Take, Dial), so its automatic
	// client cap leaves half the room to them (SharedCap).
	Upstreams bool
	// Answer is what a refused client connection is sent before it is closed.
	Answer []byte
}

// New returns a budget for c.
func New(c Config) *Budget {
	b := &Budget{maxClients: Cap(c.MaxConnections, c.Limit), room: Room(c.Limit), answer: c.Answer}
	if c.Upstreams {
		b.maxClients = SharedCap(c.MaxConnections, c.Limit)
	}
	return b
}

// MaxClients is the client connection cap (0: unbounded).
func (b *Budget) MaxClients() int64 { return b.maxClients }

// Answer is what a refused client connection is sent (for engines that write it themselves).
func (b *Budget) Answer() []byte { return b.answer }

// Clients is the number of open client connections counted.
func (b *Budget) Clients() int64 { return b.clients.Load() }

// Upstreams is the number of open upstream connections counted.
func (b *Budget) Upstreams() int64 { return b.total.Load() - b.clients.Load() }

// take counts one connection against the room (and the client cap when client is set); false
// means over either, and nothing is counted.
func (b *Budget) take(client bool) bool {
	if client && b.clients.Add(1) > b.maxClients && b.maxClients > 0 {
		b.clients.Add(-1)
		return false
	}
	if b.total.Add(1) > b.room && b.room > 0 {
		b.total.Add(-1)
		if client {
			b.clients.Add(-1)
		}
		return false
	}
	return true
}

// Admit counts a new client connection; false means it is over the cap or the room (not
// counted, and OnRefuse has run): answer it with Refuse.
func (b *Budget) Admit() bool {
	if b.take(true) {
		return true
	}
	if b.OnRefuse != nil {
		b.OnRefuse()
	}
	return false
}

// Done ends a client connection Admit counted.
func (b *Budget) Done() {
	b.clients.Add(-1)
	b.total.Add(-1)
}

// Refuse answers a connection Admit refused and closes it, without waiting on a slow client.
func (b *Budget) Refuse(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(b.answer)
	c.Close()
}

// Take counts a new upstream connection before it is dialled; false means the room is used up
// (OnShed has run) and the request should be shed, not sent.
func (b *Budget) Take() bool {
	if b.take(false) || (b.reclaim() && b.take(false)) {
		return true
	}
	if b.OnShed != nil {
		b.OnShed()
	}
	return false
}

// reclaim runs Reclaim unless it ran less than ReclaimEvery ago, and reports whether it ran.
func (b *Budget) reclaim() bool {
	if b.Reclaim == nil {
		return false
	}
	now, last := time.Now().UnixNano(), b.lastReclaim.Load()
	if now-last < int64(ReclaimEvery) || !b.lastReclaim.CompareAndSwap(last, now) {
		return false
	}
	b.Reclaim()
	return true
}

// Give ends an upstream connection Take counted.
func (b *Budget) Give() { b.total.Add(-1) }

// Conn is a connection counted against a Budget: its first Close gives its place back, whoever
// serves it.
type Conn struct {
	net.Conn
	b        *Budget
	upstream bool
	once     atomic.Bool
}

// Track wraps a client connection Admit counted, so that closing it ends the count.
func (b *Budget) Track(c net.Conn) *Conn { return &Conn{Conn: c, b: b} }

// Close closes the connection and gives its place back once.
func (c *Conn) Close() error {
	if c.once.CompareAndSwap(false, true) {
		if c.upstream {
			c.b.Give()
		} else {
			c.b.Done()
		}
	}
	return c.Conn.Close()
}

// CloseWrite half-closes the connection when it can, and closes it otherwise.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// SyscallConn gives the raw connection under a TCP connection (to peek at idle sockets).
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("raw connection: %T has none", c.Conn)
	}
	return sc.SyscallConn()
}

// DialFunc is the signature of net.Dialer.DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dial wraps dial so that each connection it makes is counted as an upstream connection until
// it is closed; past the room it fails with ErrExhausted without dialling.
func (b *Budget) Dial(dial DialFunc) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !b.Take() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: ErrExhausted}
		}
		c, err := dial(ctx, network, addr)
		if err != nil {
			b.Give()
			return nil, err
		}
		return &Conn{Conn: c, b: b, upstream: true}, nil
	}
}

// Listener admits accepted connections through a Budget; the ones refused are answered and
// closed without reaching the server.
type Listener struct {
	net.Listener
	Budget *Budget
	// Wrap, when set, wraps each admitted connection (to add a stop's own behaviour).
	Wrap func(*Conn) net.Conn
}

// Accept returns the next admitted connection.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.Budget.Admit() {
			go l.Budget.Refuse(c)
			continue
		}
		tc := l.Budget.Track(c)
		if l.Wrap != nil {
			return l.Wrap(tc), nil
		}
		return tc, nil
	}
}

// AcceptBackoff paces an accept loop after errors (out of descriptors and the like) instead of
// letting it spin, as net/http does: 5 ms after the first, doubling to 1 s, and back to none
// after a connection is accepted. The zero value is ready.
type AcceptBackoff struct{ delay time.Duration }

// Failed returns how long to wait after an accept error.
func (b *AcceptBackoff) Failed() time.Duration {
	b.delay = min(max(2*b.delay, 5*time.Millisecond), time.Second)
	return b.delay
}

// Accepted resets the wait after a connection was accepted.
func (b *AcceptBackoff) Accepted() { b.delay = 0 }
