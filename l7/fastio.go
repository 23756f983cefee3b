package l7

import (
	"net"
	"sync"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/l7/balance"
)

// upConn is a pooled upstream HTTP/1.1 connection with its own read buffer.
type upConn struct {
	h1.Reader
	idleSince time.Time
	reused    bool
}

// upstreams holds the idle fast-path connections of one pool, per backend: a LIFO stack, so
// the most recently used (warmest, least likely closed by the backend) goes out first.
type upstreams struct {
	mu      sync.Mutex
	idle    map[*balance.Backend][]*upConn
	maxIdle int
	idleFor time.Duration
	dialer  net.Dialer
	closed  bool
}

func newUpstreams(pc Pool) *upstreams {
	return &upstreams{idle: map[*balance.Backend][]*upConn{}, maxIdle: pc.MaxIdlePerBackend,
		idleFor: pc.Timeouts.Idle, dialer: net.Dialer{Timeout: pc.Timeouts.Connect, KeepAlive: 30 * time.Second}}
}

// get returns an idle connection to b that has not been idle too long, or dials a new one.
func (u *upstreams) get(b *balance.Backend, now time.Time) (*upConn, error) {
	u.mu.Lock()
	for list := u.idle[b]; len(list) > 0; list = u.idle[b] {
		uc := list[len(list)-1]
		u.idle[b] = list[:len(list)-1]
		if now.Sub(uc.idleSince) < u.idleFor {
			u.mu.Unlock()
			uc.reused = true
			return uc, nil
		}
		uc.Conn.Close()
	}
	u.mu.Unlock()
	return u.dial(b)
}

func (u *upstreams) dial(b *balance.Backend) (*upConn, error) {
	c, err := u.dialer.Dial("tcp", b.Address)
	if err != nil {
		return nil, err
	}
	return &upConn{Reader: h1.Reader{Conn: c, Buf: make([]byte, 16<<10)}}, nil
}

// put returns a connection whose last response was read completely; past maxIdle it is closed.
func (u *upstreams) put(b *balance.Backend, uc *upConn, now time.Time) {
	uc.idleSince = now
	u.mu.Lock()
	if !u.closed && len(u.idle[b]) < u.maxIdle {
		u.idle[b] = append(u.idle[b], uc)
		u.mu.Unlock()
		return
	}
	u.mu.Unlock()
	uc.Conn.Close()
}

// closeIdle closes every idle connection; with final set, later puts close theirs too.
func (u *upstreams) closeIdle(final bool) {
	u.mu.Lock()
	idle := u.idle
	u.idle = map[*balance.Backend][]*upConn{}
	u.closed = u.closed || final
	u.mu.Unlock()
	for _, list := range idle {
		for _, uc := range list {
			uc.Conn.Close()
		}
	}
}
