package h1

import (
	"errors"
	"io"
	"net"
	"time"
)

// Reader is a growable read buffer over a connection: the fast paths parse heads in place and
// forward body bytes straight out of it, so nothing is copied twice. Buf[R:W] are the bytes
// read but not yet consumed; the event loops, which read raw descriptors, fill Buf themselves
// (MakeRoom, then W += n) and leave Conn nil.
type Reader struct {
	Conn net.Conn
	Buf  []byte
	R, W int
	dl   time.Time // the deadline in effect
}

// ErrHeadTooLarge reports a head that does not fit the limit a Reader was given.
var ErrHeadTooLarge = errors.New("head too large")

// deadlineSlack is how much later than the one in effect a deadline must be before it is set
// again. Setting one costs a timer update per call, and with keep-alive traffic the idle,
// total and upstream deadlines move forward by microseconds per request; a deadline may thus
// fire up to this much early, never late.
const deadlineSlack = 50 * time.Millisecond

// SetDeadline sets the read and write deadline to t, lazily (see deadlineSlack).
func (cr *Reader) SetDeadline(t time.Time) {
	if cr.lazy(t) {
		_ = cr.Conn.SetDeadline(t)
	}
}

// SetReadDeadline sets the read deadline only, lazily (see deadlineSlack); a Reader uses one of
// SetDeadline and SetReadDeadline, not both.
func (cr *Reader) SetReadDeadline(t time.Time) {
	if cr.lazy(t) {
		_ = cr.Conn.SetReadDeadline(t)
	}
}

func (cr *Reader) lazy(t time.Time) bool {
	if !t.Before(cr.dl) && t.Sub(cr.dl) < deadlineSlack {
		return false
	}
	cr.dl = t
	return true
}

// Buffered returns the bytes read but not yet consumed.
func (cr *Reader) Buffered() []byte { return cr.Buf[cr.R:cr.W] }

// Consume marks n buffered bytes as used.
func (cr *Reader) Consume(n int) {
	cr.R += n
	if cr.R == cr.W {
		cr.R, cr.W = 0, 0
	}
}

// MakeRoom makes space after the buffered bytes: compacting, then growing up to limit
// (ErrHeadTooLarge when the buffer is full at limit).
func (cr *Reader) MakeRoom(limit int) error {
	if cr.W < len(cr.Buf) {
		return nil
	}
	if cr.R > 0 {
		cr.W = copy(cr.Buf, cr.Buf[cr.R:cr.W])
		cr.R = 0
		return nil
	}
	if len(cr.Buf) >= limit {
		return ErrHeadTooLarge
	}
	nb := make([]byte, min(2*len(cr.Buf), limit))
	cr.W = copy(nb, cr.Buf[cr.R:cr.W])
	cr.R, cr.Buf = 0, nb
	return nil
}

// Fill reads at least one more byte, making room first (see MakeRoom).
func (cr *Reader) Fill(limit int) error {
	if err := cr.MakeRoom(limit); err != nil {
		return err
	}
	n, err := cr.Conn.Read(cr.Buf[cr.W:])
	cr.W += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// ReadHead waits until a whole head is buffered and returns its length; more than limit
// buffered bytes without the end of a head is ErrHeadTooLarge.
func (cr *Reader) ReadHead(limit int) (int, error) {
	from := 0
	for {
		if end := HeadEnd(cr.Buffered(), from); end >= 0 {
			return end, nil
		}
		from = max(0, cr.W-cr.R-3)
		if cr.W-cr.R > limit {
			return 0, ErrHeadTooLarge
		}
		if err := cr.Fill(limit + 4<<10); err != nil {
			return 0, err
		}
	}
}

// ChunkedReader re-frames a chunked body read from R with the Chunked decoder: Read returns
// the canonical framing, io.EOF after the body's last byte, and the refusal (a *Rejection) of
// malformed framing. It reads through a buffer the caller provides and allocates nothing;
// Rest returns the bytes read past the end of the body.
type ChunkedReader struct {
	R    io.Reader
	buf  []byte
	r, w int
	dec  Chunked
	done bool
	err  error
}

// NewChunkedReader reads the chunked body on r through buf (16 KiB when nil).
func NewChunkedReader(r io.Reader, buf []byte) *ChunkedReader {
	if len(buf) == 0 {
		buf = make([]byte, 16<<10)
	}
	return &ChunkedReader{R: r, buf: buf}
}

// Read implements io.Reader.
func (cr *ChunkedReader) Read(p []byte) (int, error) {
	for {
		if cr.done {
			return 0, io.EOF
		}
		nd, ns, done, rej := cr.dec.Feed(p, cr.buf[cr.r:cr.w])
		cr.r += ns
		if rej != nil {
			return nd, rej
		}
		cr.done = done
		if nd > 0 || len(p) == 0 {
			return nd, nil
		}
		if cr.r < cr.w {
			continue
		}
		if cr.err != nil {
			if cr.err == io.EOF {
				return 0, io.ErrUnexpectedEOF // the connection ended inside the body
			}
			return 0, cr.err
		}
		n, err := cr.R.Read(cr.buf)
		cr.r, cr.w, cr.err = 0, n, err
	}
}

// Rest returns the bytes read from R after the end of the body.
func (cr *ChunkedReader) Rest() []byte { return cr.buf[cr.r:cr.w] }
