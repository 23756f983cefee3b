package l7

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/guard"
)

// connReader is a growable read buffer over a connection: the fast path parses heads in place
// and forwards body bytes straight out of it, so nothing is copied twice.
type connReader struct {
	c    net.Conn
	buf  []byte
	r, w int
	dl   time.Time // the read and write deadline in effect
}

// deadlineSlack is how much later than the one in effect a deadline must be before it is set
// again. Setting one costs a timer update per call, and with keep-alive traffic the idle,
// total and upstream deadlines move forward by microseconds per request; a deadline may thus
// fire up to this much early, never late.
const deadlineSlack = 50 * time.Millisecond

// setDeadline sets the read and write deadline to t, lazily (see deadlineSlack).
func (cr *connReader) setDeadline(t time.Time) {
	if !t.Before(cr.dl) && t.Sub(cr.dl) < deadlineSlack {
		return
	}
	cr.dl = t
	_ = cr.c.SetDeadline(t)
}

// buffered returns the bytes read but not yet consumed.
func (cr *connReader) buffered() []byte { return cr.buf[cr.r:cr.w] }

// consume marks n buffered bytes as used.
func (cr *connReader) consume(n int) {
	cr.r += n
	if cr.r == cr.w {
		cr.r, cr.w = 0, 0
	}
}

// makeRoom makes space after the buffered bytes: compacting, then growing up to limit.
func (cr *connReader) makeRoom(limit int) error {
	if cr.w < len(cr.buf) {
		return nil
	}
	if cr.r > 0 {
		cr.w = copy(cr.buf, cr.buf[cr.r:cr.w])
		cr.r = 0
		return nil
	}
	if len(cr.buf) >= limit {
		return errHeadTooLarge
	}
	nb := make([]byte, min(2*len(cr.buf), limit))
	cr.w = copy(nb, cr.buf[cr.r:cr.w])
	cr.r, cr.buf = 0, nb
	return nil
}

// fill reads at least one more byte, making room first (compacting, then growing up to limit).
func (cr *connReader) fill(limit int) error {
	if err := cr.makeRoom(limit); err != nil {
		return err
	}
	n, err := cr.c.Read(cr.buf[cr.w:])
	cr.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// readHead waits until a whole head is buffered and returns its length. At most limit bytes are
// buffered (limit) while looking for the end of the head.
func (cr *connReader) readHead(limit int) (int, error) {
	from := 0
	for {
		if end := guard.HeadEnd(cr.buffered(), from); end >= 0 {
			return end, nil
		}
		from = max(0, cr.w-cr.r-3)
		if cr.w-cr.r > limit {
			return 0, errHeadTooLarge
		}
		if err := cr.fill(limit + 4<<10); err != nil {
			return 0, err
		}
	}
}

var errHeadTooLarge = errors.New("head too large")

// upConn is a pooled upstream HTTP/1.1 connection with its own read buffer.
type upConn struct {
	connReader
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
		uc.c.Close()
	}
	u.mu.Unlock()
	return u.dial(b)
}

func (u *upstreams) dial(b *balance.Backend) (*upConn, error) {
	c, err := u.dialer.Dial("tcp", b.Address)
	if err != nil {
		return nil, err
	}
	return &upConn{connReader: connReader{c: c, buf: make([]byte, 16<<10)}}, nil
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
	uc.c.Close()
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
			uc.c.Close()
		}
	}
}
