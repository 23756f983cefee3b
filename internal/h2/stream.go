package h2

import (
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// Field is one regular request header field (name lowercase, as HTTP/2 requires).
type Field struct{ Name, Value string }

// Stream is one request stream. The request's fields are set before the Handler runs and
// read-only after; the body and the response go through Read, Respond and Data. A Stream
// is reused for a later stream once its handler returned.
type Stream struct {
	c  *Conn
	ID uint32
	// The request pseudo-header fields (RFC 9113 8.3.1).
	Method, Scheme, Authority, Path string
	// Protocol is an extended CONNECT's :protocol (RFC 8441), e.g. "websocket"; "" otherwise.
	Protocol string
	// Fields are the regular fields in order (cookie fields joined into one, RFC 9113 8.2.3).
	Fields []Field
	// ContentLength is the content-length field's value, or -1.
	ContentLength int64
	// TooLarge: the header list was over Config.MaxHeaderBytes (the handler answers 431).
	TooLarge bool

	cond *sync.Cond // on c.mu: data arrived, window opened, reset, deadline
	// guarded by c.mu
	in         []byte // request body bytes received, not yet read
	inR        int
	recvWindow int64 // what the client may still send
	unacked    int   // body bytes read and not yet credited back
	received   int64
	recvDone   bool    // END_STREAM received (or the stream reset)
	trailers   []Field // the request's trailer fields, once recvDone
	sendWindow int64
	sendDone   bool // END_STREAM sent (or the stream reset)
	reset      bool // reset by either side
	peerReset  bool // reset by the client (its RST_STREAM came first)
	running    bool // the handler runs
	deadline   time.Time
	timer      *time.Timer
	doneCh     chan struct{} // closed on reset or when the connection dies (Done)
	onReset    func()        // run once on reset or when the connection dies (OnReset)
}

// Done is closed when the stream is reset or the connection ends before the stream did.
func (st *Stream) Done() <-chan struct{} {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if st.doneCh == nil {
		st.doneCh = make(chan struct{})
		if st.reset || st.c.dead {
			close(st.doneCh)
		}
	}
	return st.doneCh
}

// OnReset arranges for f to run (on a goroutine of its own) once the stream is reset or the
// connection dies before the stream ended, at once when that already happened; nil forgets an
// earlier f. Unlike Done it costs no channel, so the stream stays reusable.
func (st *Stream) OnReset(f func()) {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	st.onReset = f
	if f != nil && (st.reset || st.c.dead) {
		st.onReset = nil
		go f()
	}
}

// wake tells a waiting handler something changed (c.mu held).
func (st *Stream) wake() {
	st.cond.Broadcast()
	if (st.reset || st.c.dead) && st.onReset != nil {
		f := st.onReset
		st.onReset = nil
		go f()
	}
	if (st.reset || st.c.dead) && st.doneCh != nil {
		select {
		case <-st.doneCh:
		default:
			close(st.doneCh)
		}
	}
}

// SetDeadline bounds every later wait of Read and Data (zero: none).
func (st *Stream) SetDeadline(t time.Time) {
	st.c.mu.Lock()
	st.deadline = t
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	st.c.mu.Unlock()
}

// wait blocks until woken, or fails once the deadline passed (c.mu held).
func (st *Stream) wait() error {
	if !st.deadline.IsZero() {
		d := time.Until(st.deadline)
		if d <= 0 {
			return os.ErrDeadlineExceeded
		}
		if st.timer == nil {
			// Armed only when a wait happens: most streams never wait, so cost no timer.
			st.timer = time.AfterFunc(d, func() {
				st.c.mu.Lock()
				st.cond.Broadcast()
				st.c.mu.Unlock()
			})
		}
	}
	st.cond.Wait()
	return nil
}

// errReset is what Read and Data return on a stream that was reset or whose connection ended.
var errReset = &streamError{"http2 stream reset or connection closed"}

type streamError struct{ s string }

func (e *streamError) Error() string { return e.s }

// Received reports how many body bytes are buffered and whether that is the whole body.
func (st *Stream) Received() (n int, complete bool) {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return len(st.in) - st.inR, st.recvDone && !st.reset
}

// Read reads request body bytes (io.EOF after the last), crediting the flow-control windows.
func (st *Stream) Read(p []byte) (int, error) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(st.in) == st.inR {
		switch {
		case st.reset || c.dead:
			return 0, errReset
		case st.recvDone:
			return 0, io.EOF
		}
		if err := st.wait(); err != nil {
			return 0, err
		}
	}
	n := copy(p, st.in[st.inR:])
	st.inR += n
	if st.inR == len(st.in) {
		st.in, st.inR = st.in[:0], 0
	}
	st.credit(n)
	return n, nil
}

// RequestTrailers are the trailer fields that ended the request (RFC 9113 8.1), checked as its
// headers were; none until Read has returned io.EOF.
func (st *Stream) RequestTrailers() []Field {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	if !st.recvDone || st.reset {
		return nil
	}
	return st.trailers
}

// credit returns n read bytes to the client's windows, in updates of at least a quarter
// window (c.mu held).
func (st *Stream) credit(n int) {
	c := st.c
	st.unacked += n
	flush := false
	if !st.recvDone && st.unacked >= streamWindow/4 {
		c.wbuf = appendWindowUpdate(c.wbuf, st.ID, uint32(st.unacked))
		st.recvWindow += int64(st.unacked)
		st.unacked = 0
		flush = true
	}
	if flush {
		c.wcond.Signal()
	}
	c.creditConn(n)
}

// creditConn counts n more bytes of the connection window as consumed and returns them to the
// client once a quarter window is due (c.mu held).
func (c *Conn) creditConn(n int) {
	c.recvUnacked += n
	if c.recvUnacked >= connWindow/4 {
		c.wbuf = appendWindowUpdate(c.wbuf, 0, uint32(c.recvUnacked))
		c.recvUsed -= c.recvUnacked
		c.recvUnacked = 0
		c.wcond.Signal()
	}
}

// Respond sends a response header block (AppendStatus, AppendField), then data (which may be
// empty), then ends the stream when end is set. A 1xx head is sent with no data and end false.
func (st *Stream) Respond(block, data []byte, end bool) error {
	c := st.c
	c.mu.Lock()
	if st.reset || st.sendDone || c.dead {
		c.mu.Unlock()
		return errReset
	}
	c.wbuf = appendHeaders(c.wbuf, st.ID, block, end && len(data) == 0, c.peerFrame)
	if end && len(data) == 0 {
		st.sendDone = true
		c.wcond.Signal()
		c.mu.Unlock()
		return nil
	}
	if len(data) == 0 {
		c.wcond.Signal()
	}
	err := st.dataLocked(data, end)
	c.mu.Unlock()
	return err
}

// TryRespond sends a whole response, header block and data, ending the stream, when it can
// go at once: the data within the flow-control windows and one frame, and the writer not
// behind. It reports false, having sent nothing, when it cannot (Respond would wait); true
// also when the stream was reset meanwhile (there is no one to answer).
func (st *Stream) TryRespond(block, data []byte) bool {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.reset || st.sendDone || c.dead {
		return true
	}
	if n := int64(len(data)); n > st.sendWindow || n > c.sendWindow || len(data) > c.peerFrame || len(c.wbuf) > maxPending {
		return false
	}
	c.wbuf = appendHeaders(c.wbuf, st.ID, block, len(data) == 0, c.peerFrame)
	if len(data) > 0 {
		c.wbuf = append(appendFrameHeader(c.wbuf, len(data), http2.FrameData, http2.FlagDataEndStream, st.ID), data...)
		st.sendWindow -= int64(len(data))
		c.sendWindow -= int64(len(data))
	}
	st.sendDone = true
	c.wcond.Signal()
	return true
}

// Trailers ends the stream with a trailer header block (AppendField only: no pseudo-header,
// RFC 9113 8.1), after the head and any data already sent. gRPC carries its status there.
func (st *Stream) Trailers(block []byte) error {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.reset || st.sendDone || c.dead {
		return errReset
	}
	c.wbuf = appendHeaders(c.wbuf, st.ID, block, true, c.peerFrame)
	st.sendDone = true
	c.wcond.Signal()
	return nil
}

// Data sends response body bytes within the flow-control windows, waiting for the client to
// open them (up to the deadline); end ends the stream after them.
func (st *Stream) Data(data []byte, end bool) error {
	st.c.mu.Lock()
	defer st.c.mu.Unlock()
	return st.dataLocked(data, end)
}

func (st *Stream) dataLocked(data []byte, end bool) error {
	c := st.c
	for {
		if st.reset || st.sendDone || c.dead {
			return errReset
		}
		if len(data) == 0 && !end {
			return nil
		}
		n := int(max(0, min(int64(len(data)), st.sendWindow, c.sendWindow, int64(c.peerFrame))))
		if n == 0 && len(data) > 0 || len(c.wbuf) > maxPending {
			// Window closed, or the writer is behind: wait (bounded by the deadline).
			c.wcond.Signal()
			var err error
			if len(c.wbuf) > maxPending {
				err = st.waitDrained()
			} else {
				err = st.wait()
			}
			if err != nil {
				return err
			}
			continue
		}
		last := end && n == len(data)
		flags := http2.Flags(0)
		if last {
			flags = http2.FlagDataEndStream
		}
		c.wbuf = append(appendFrameHeader(c.wbuf, n, http2.FrameData, flags, st.ID), data[:n]...)
		st.sendWindow -= int64(n)
		c.sendWindow -= int64(n)
		data = data[n:]
		c.wcond.Signal()
		if last {
			st.sendDone = true
			return nil
		}
	}
}

// waitDrained waits for the writer to take the buffer (c.mu held).
func (st *Stream) waitDrained() error {
	if !st.deadline.IsZero() && time.Now().After(st.deadline) {
		return os.ErrDeadlineExceeded
	}
	st.c.drained.Wait()
	return nil
}

// Reset cancels the stream with code (RST_STREAM), unless it already ended.
func (st *Stream) Reset(code http2.ErrCode) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	st.resetLocked(code, true)
}

func (st *Stream) resetLocked(code http2.ErrCode, send bool) {
	if st.reset {
		return
	}
	st.reset, st.recvDone, st.sendDone = true, true, true
	if send && !st.c.dead {
		st.c.wbuf = appendRST(st.c.wbuf, st.ID, code)
		st.c.wcond.Signal()
	}
	st.wake()
}

// finish ends a stream whose handler returned: a response that did not end is cut
// (RST_STREAM CANCEL); a request body the handler did not wait for is refused (RST_STREAM
// NO_ERROR, RFC 9113 8.1); buffered body bytes are credited back to the connection. onReader:
// it runs on the reader (Config.Inline), which arms the idle timeout before its next read
// anyway (a clock read per stream saved).
func (st *Stream) finish(onReader bool) {
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case !st.sendDone:
		st.resetLocked(http2.ErrCodeCancel, true)
	case !st.recvDone:
		st.resetLocked(http2.ErrCodeNo, true)
	}
	if left := len(st.in) - st.inR; left > 0 {
		c.creditConn(left)
	}
	st.in, st.inR = st.in[:0], 0
	if st.timer != nil {
		st.timer.Stop()
		st.timer = nil
	}
	st.running = false
	if st.reset {
		c.rememberReset(st.ID, st.peerReset)
	}
	delete(c.streams, st.ID)
	c.active--
	if st.doneCh == nil && len(c.free) < int(c.cfg.MaxConcurrentStreams) {
		c.free = append(c.free, st)
	}
	if c.goingAway && c.active == 0 {
		c.closing = true
		c.wcond.Signal()
	}
	if c.active == 0 && !onReader {
		c.idleDeadlineLocked()
	}
}
