package l7

import (
	"errors"
	"io"
	"net"
	"time"

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
