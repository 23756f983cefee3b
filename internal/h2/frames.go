package h2

import (
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// dispatch handles one frame read by the reader goroutine; an error is a connection error
// (GOAWAY with its code).
func (c *Conn) dispatch(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.HeadersFrame:
		return c.onHeaders(f)
	case *http2.ContinuationFrame:
		return c.onContinuation(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.PingFrame:
		if f.IsAck() {
			return nil
		}
		return c.control(func(b []byte) []byte {
			return append(appendFrameHeader(b, 8, http2.FramePing, http2.FlagPingAck, 0), f.Data[:]...)
		})
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.GoAwayFrame:
		c.mu.Lock()
		c.goingAway = true // the client opens no more streams; the taken ones finish
		if c.active == 0 {
			c.closing = true
			c.wcond.Signal()
		}
		c.mu.Unlock()
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // clients never push (RFC 9113 8.4)
	case *http2.PriorityFrame:
		return c.onPriority(f)
	}
	return nil // unknown frame types are ignored
}

// onPriority takes a PRIORITY frame. Priorities are ignored (RFC 9113 5.3.2 lets a server),
// but a stream that depends on itself is a stream error PROTOCOL_ERROR (5.3.1), whatever the
// stream's state: PRIORITY may name an idle or closed stream.
func (c *Conn) onPriority(f *http2.PriorityFrame) error {
	if f.StreamDep != f.StreamID {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.streams[f.StreamID]; st != nil {
		st.resetLocked(http2.ErrCodeProtocol, true)
		return nil
	}
	return c.rstLocked(f.StreamID, http2.ErrCodeProtocol)
}

// idleStream reports a stream id the client has not opened: past the highest it opened, or
// even (only the server opens even streams, and this one never does). A frame other than
// HEADERS or PRIORITY on an idle stream is a connection error PROTOCOL_ERROR (RFC 9113 5.1).
func (c *Conn) idleStream(id uint32) bool { return id > c.maxSeen || id%2 == 0 }

// peerState is what a stream the client already opened is, for a frame the client sends on it.
type peerState int

const (
	streamOpen        peerState = iota // the client may still send (DATA, trailers)
	streamHalfClosed                   // the client ended its side (END_STREAM); the handler runs
	streamResetByUs                    // we reset it: what the client sent meanwhile is ignored
	streamResetByPeer                  // the client reset it
	streamClosed                       // ended both ways, or an id the client skipped
)

// stateLocked classifies stream id, which the client opened (not idleStream) (c.mu held).
// RFC 9113 5.1: frames on a stream the client ended or reset are its error (STREAM_CLOSED);
// frames on a stream we reset may have been in flight and are ignored.
func (c *Conn) stateLocked(id uint32) (*Stream, peerState) {
	st := c.streams[id]
	switch {
	case st == nil:
		if found, byPeer := c.recentReset(id); found && byPeer {
			return nil, streamResetByPeer
		} else if found {
			return nil, streamResetByUs
		}
		return nil, streamClosed
	case st.reset && st.peerReset:
		return st, streamResetByPeer
	case st.reset:
		return st, streamResetByUs
	case st.recvDone:
		return st, streamHalfClosed
	}
	return st, streamOpen
}

// resetsKept is how many streams that ended in RST_STREAM a connection remembers after their
// handlers returned, to tell frames in flight (ignored) from frames on a stream the client
// closed (STREAM_CLOSED). 128 ids cost 512 bytes, allocated at the first such stream.
const resetsKept = 128

// rememberReset records that stream id, now leaving c.streams, ended in RST_STREAM, sent by
// the client (byPeer) or by us (c.mu held). The top bit of an id is free (ids are 31 bits).
func (c *Conn) rememberReset(id uint32, byPeer bool) {
	if c.resets == nil {
		c.resets = make([]uint32, resetsKept)
	}
	if byPeer {
		id |= 1 << 31
	}
	c.resets[c.resetsNext] = id
	c.resetsNext = (c.resetsNext + 1) % resetsKept
}

// recentReset looks stream id up among the remembered resets (c.mu held).
func (c *Conn) recentReset(id uint32) (found, byPeer bool) {
	for _, r := range c.resets {
		if r&^(1<<31) == id && id != 0 {
			return true, r&(1<<31) != 0
		}
	}
	return false, false
}

// rstLocked answers a frame on a stream that is not running with RST_STREAM (a stream error),
// refusing a client that provokes them faster than it reads (c.mu held).
func (c *Conn) rstLocked(id uint32, code http2.ErrCode) error {
	if len(c.wbuf) > maxPending {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	c.wbuf = appendRST(c.wbuf, id, code)
	c.wcond.Signal()
	return nil
}

// control queues a control frame the client asked for (PING and SETTINGS acks), refusing a
// client that asks faster than it reads (a control frame flood).
func (c *Conn) control(add func([]byte) []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.wbuf) > maxPending {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	c.wbuf = add(c.wbuf)
	c.wcond.Signal()
	return nil
}

func (c *Conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.mu.Lock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.initWindow
			c.initWindow = int64(s.Val)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > 1<<31-1 {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
				st.cond.Broadcast()
			}
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(s.Val)
		}
		return nil
	})
	c.mu.Unlock()
	if err != nil {
		return err
	}
	return c.control(func(b []byte) []byte {
		return appendFrameHeader(b, 0, http2.FrameSettings, http2.FlagSettingsAck, 0)
	})
}

func (c *Conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		if f.Increment == 0 {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		for _, st := range c.streams {
			st.cond.Broadcast()
		}
		return nil
	}
	if c.idleStream(f.StreamID) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	st := c.streams[f.StreamID]
	if st == nil || st.reset {
		return nil // closed: a late update is fine
	}
	if f.Increment == 0 {
		st.resetLocked(http2.ErrCodeProtocol, true)
		return nil
	}
	st.sendWindow += int64(f.Increment)
	if st.sendWindow > 1<<31-1 {
		st.resetLocked(http2.ErrCodeFlowControl, true)
		return nil
	}
	st.cond.Broadcast()
	return nil
}

// onReset takes the client's RST_STREAM. Cancelling a stream whose handler runs costs a token:
// a client that cancels faster than Config.ResetsPerSecond (burst twice that) is making the
// proxy start work it throws away (rapid reset, CVE-2023-44487) and loses the connection.
func (c *Conn) onReset(f *http2.RSTStreamFrame) error {
	if c.idleStream(f.StreamID) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	st := c.streams[f.StreamID]
	running := st != nil && !st.reset && st.running
	if running {
		st.peerReset = true
		st.resetLocked(f.ErrCode, false)
	}
	c.mu.Unlock()
	if !running {
		return nil
	}
	now := time.Now()
	rate := float64(c.cfg.ResetsPerSecond)
	c.tokens = min(2*rate, c.tokens+now.Sub(c.lastReset).Seconds()*rate)
	c.lastReset = now
	if c.tokens < 1 {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	c.tokens--
	return nil
}

func (c *Conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int(f.Length) // the whole frame counts, padding included
	if c.idleStream(id) {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	data := f.Data()
	if len(data) == 0 && !f.StreamEnded() {
		if c.empty++; c.empty > maxEmpty {
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recvUsed+n > connWindow {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvUsed += n
	st, state := c.stateLocked(id)
	if state != streamOpen {
		c.creditConn(n) // never to be read: the connection window gets it back at once
	}
	switch state {
	case streamResetByUs:
		return nil // sent before our RST_STREAM reached the client (RFC 9113 5.1)
	case streamHalfClosed:
		st.resetLocked(http2.ErrCodeStreamClosed, true)
		return nil
	case streamResetByPeer, streamClosed:
		// RFC 9113 6.1: DATA on a stream not open is a stream error STREAM_CLOSED.
		return c.rstLocked(id, http2.ErrCodeStreamClosed)
	}
	if int64(n) > st.recvWindow {
		c.creditConn(n)
		st.resetLocked(http2.ErrCodeFlowControl, true)
		return nil
	}
	st.recvWindow -= int64(n)
	st.received += int64(len(data))
	c.creditConn(n - len(data)) // padding is consumed now
	if st.ContentLength >= 0 && (st.received > st.ContentLength || f.StreamEnded() && st.received != st.ContentLength) {
		// RFC 9113 8.1.1: a body that disagrees with content-length is malformed.
		c.creditConn(len(data))
		st.resetLocked(http2.ErrCodeProtocol, true)
		return nil
	}
	st.in = append(st.in, data...)
	if f.StreamEnded() {
		st.recvDone = true
	}
	st.cond.Broadcast()
	return nil
}

// newStream takes a stream from the free list or makes one (c.mu held).
func (c *Conn) newStream(id uint32) *Stream {
	var st *Stream
	if n := len(c.free); n > 0 {
		st = c.free[n-1]
		c.free = c.free[:n-1]
		*st = Stream{c: c, cond: st.cond, in: st.in[:0], Fields: st.Fields[:0], trailers: st.trailers[:0]}
	} else {
		st = &Stream{c: c}
		st.cond = sync.NewCond(&c.mu)
	}
	st.ID, st.ContentLength = id, -1
	st.recvWindow, st.sendWindow = streamWindow, c.initWindow
	return st
}
