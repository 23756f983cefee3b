package h2

import (
	"strconv"
	"strings"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

const maxBlockFrames = 64 // HEADERS + CONTINUATION frames in one header block

func (c *Conn) onHeaders(f *http2.HeadersFrame) error {
	if f.StreamID%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // clients open odd streams
	}
	c.blockFrame = f
	c.block = append(c.block[:0], f.HeaderBlockFragment()...)
	c.blockN = 1
	if f.HeadersEnded() {
		return c.endBlock()
	}
	return c.checkBlock()
}

// onContinuation adds to the header block (the Framer checked it follows HEADERS of the same
// stream).
func (c *Conn) onContinuation(f *http2.ContinuationFrame) error {
	frag := f.HeaderBlockFragment()
	if len(frag) == 0 && !f.HeadersEnded() {
		if c.empty++; c.empty > maxEmpty {
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	}
	c.block = append(c.block, frag...)
	c.blockN++
	if err := c.checkBlock(); err != nil {
		return err
	}
	if f.HeadersEnded() {
		return c.endBlock()
	}
	return nil
}

// checkBlock refuses a header block too large to be worth decoding (a CONTINUATION flood):
// more than twice the header list limit compressed, or more than maxBlockFrames frames.
func (c *Conn) checkBlock() error {
	if len(c.block) > 2*max(c.cfg.MaxHeaderBytes, 4096) || c.blockN > maxBlockFrames {
		return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	}
	return nil
}

// endBlock decodes a complete header block: a new stream's request, or trailers.
func (c *Conn) endBlock() error {
	f := c.blockFrame
	id := f.StreamID
	if id <= c.maxSeen {
		return c.trailers(id, f.StreamEnded())
	}
	c.maxSeen = id
	c.mu.Lock()
	st := c.newStream(id)
	c.mu.Unlock()
	c.cur, c.curSize, c.curBad = st, 0, ""
	_, err := c.dec.Write(c.block)
	if err == nil {
		err = c.dec.Close()
	}
	c.cur = nil
	if err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	bad := c.curBad
	if bad == "" {
		bad = st.checkPseudo()
	}
	if bad == "" && selfDependent(f) {
		bad = "stream depends on itself"
	}
	return c.start(st, f.StreamEnded(), bad)
}

// selfDependent reports a HEADERS frame whose priority makes its stream depend on itself: a
// stream error PROTOCOL_ERROR (RFC 9113 5.3.1), though priorities are otherwise ignored.
func selfDependent(f *http2.HeadersFrame) bool {
	return f.HasPriority() && f.Priority.StreamDep == f.StreamID
}

// trailers takes a header block on a stream that already has its request: trailer fields,
// decoded (the HPACK state must follow whatever the stream's state) and kept for the stream's
// RequestTrailers when they are valid and the stream still takes them.
func (c *Conn) trailers(id uint32, end bool) error {
	c.mu.Lock()
	_, state := c.stateLocked(id)
	c.mu.Unlock()
	if state == streamClosed {
		// RFC 9113 5.1: frames after END_STREAM on a closed stream are a connection error.
		return http2.ConnectionError(http2.ErrCodeStreamClosed)
	}
	c.cur, c.curSize, c.curBad, c.trail = nil, 0, "", c.trail[:0]
	_, err := c.dec.Write(c.block) // decoded whatever the stream's state: HPACK state follows
	if err == nil {
		err = c.dec.Close()
	}
	if err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, state := c.stateLocked(id) // again: the handler may have ended meanwhile
	switch state {
	case streamResetByUs:
		return nil // sent before our RST_STREAM reached the client (RFC 9113 5.1)
	case streamResetByPeer, streamClosed:
		return c.rstLocked(id, http2.ErrCodeStreamClosed)
	case streamHalfClosed:
		st.resetLocked(http2.ErrCodeStreamClosed, true)
	case streamOpen:
		return c.takeTrailers(st, end)
	}
	return nil
}

// takeTrailers ends an open stream's request with the trailer block just decoded (c.mu held).
// A trailer section is held to the rules of a header section (RFC 9113 8.1, 8.2): a field that
// would be malformed in the request's headers, a pseudo-header, a section that does not end
// the stream, or one over Config.MaxHeaderBytes is a stream error PROTOCOL_ERROR. (Its headers
// got a 431; the request is already on its way upstream by now, so only a reset can refuse it.)
func (c *Conn) takeTrailers(st *Stream, end bool) error {
	bad := c.curBad
	switch {
	case bad != "":
	case !end:
		bad = "trailers that do not end the stream"
	case selfDependent(c.blockFrame):
		bad = "stream depends on itself"
	}
	switch {
	case bad != "":
		st.resetLocked(http2.ErrCodeProtocol, true)
		if c.cfg.OnMalformed != nil {
			c.cfg.OnMalformed(bad)
		}
	default:
		if st.ContentLength >= 0 && st.received != st.ContentLength {
			st.resetLocked(http2.ErrCodeProtocol, true)
			return nil
		}
		st.trailers = append(st.trailers[:0], c.trail...)
		st.recvDone = true
		st.cond.Broadcast()
	}
	return nil
}

// start runs the handler of a new stream, or refuses it: malformed (PROTOCOL_ERROR), past the
// concurrency limit or after GOAWAY (REFUSED_STREAM: the client may retry it elsewhere).
func (c *Conn) start(st *Stream, end bool, bad string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	refuse := http2.ErrCode(0)
	switch {
	case bad != "":
		refuse = http2.ErrCodeProtocol
		if c.cfg.OnMalformed != nil {
			c.cfg.OnMalformed(bad)
		}
	case c.goingAway || c.dead:
		refuse = http2.ErrCodeRefusedStream
	case c.active >= int(c.cfg.MaxConcurrentStreams):
		refuse = http2.ErrCodeRefusedStream
	}
	if refuse != 0 {
		c.wbuf = appendRST(c.wbuf, st.ID, refuse)
		c.wcond.Signal()
		c.rememberReset(st.ID, false)
		if len(c.free) < int(c.cfg.MaxConcurrentStreams) {
			c.free = append(c.free, st)
		}
		return nil
	}
	st.recvDone = end
	st.running = true
	c.streams[st.ID] = st
	c.active++
	c.started = st.ID
	if end && c.cfg.Inline != nil && c.inline(st) {
		return nil
	}
	if n := len(c.idle); n > 0 {
		w := c.idle[n-1]
		c.idle = c.idle[:n-1]
		w <- st
		return nil
	}
	w := make(chan *Stream, 1)
	w <- st
	go c.work(w)
	return nil
}

// inline offers a stream whose request is whole to Config.Inline, on the reader goroutine
// (c.mu held, and held again on return); true when it answered the stream, which is then
// finished here.
func (c *Conn) inline(st *Stream) bool {
	c.mu.Unlock()
	answered := c.cfg.Inline(st)
	if answered {
		st.finish(true)
	}
	c.mu.Lock()
	return answered
}

// work runs stream handlers one after another, waiting idle in between: the goroutines of a
// connection are reused across its streams, so a request neither starts a goroutine nor grows
// a fresh stack (a new goroutine per stream spent 9 % of the CPU growing stacks).
func (c *Conn) work(w chan *Stream) {
	for st := range w {
		c.handler(st)
		st.finish(false)
		c.mu.Lock()
		if c.dead {
			c.mu.Unlock()
			return
		}
		c.idle = append(c.idle, w)
		c.mu.Unlock()
	}
}

// emit takes one decoded field of the block being decoded (into c.cur; trailers into c.trail).
// Fields are checked as RFC 9113 8.2 and 8.3 require; the first fault makes the request
// malformed (c.curBad), and decoding continues only to keep the HPACK state.
func (c *Conn) emit(hf hpack.HeaderField) {
	if c.curBad != "" {
		return
	}
	st := c.cur
	c.curSize += int(hf.Size())
	if st == nil { // trailers: checked like headers
		switch {
		case c.curSize > c.cfg.MaxHeaderBytes:
			c.curBad = "trailer section over the header list size limit"
		case strings.HasPrefix(hf.Name, ":"):
			c.curBad = "pseudo-header field in trailers"
		default:
			if bad := checkField(hf.Name, hf.Value); bad != "" {
				c.curBad = bad + " in trailers"
				return
			}
			c.trail = append(c.trail, Field{Name: hf.Name, Value: hf.Value})
		}
		return
	}
	if c.curSize > c.cfg.MaxHeaderBytes {
		st.TooLarge = true
		return
	}
	if strings.HasPrefix(hf.Name, ":") {
		c.curBad = st.pseudo(hf.Name, hf.Value)
		return
	}
	if bad := checkField(hf.Name, hf.Value); bad != "" {
		c.curBad = bad
		return
	}
	switch hf.Name {
	case "content-length":
		n, err := strconv.ParseInt(hf.Value, 10, 64)
		if err != nil || n < 0 || hf.Value[0] == '+' || (st.ContentLength >= 0 && st.ContentLength != n) {
			c.curBad = "invalid content-length"
			return
		}
		if st.ContentLength >= 0 {
			return // a repeated equal value is one field
		}
		st.ContentLength = n
	case "cookie":
		for i := range st.Fields {
			if st.Fields[i].Name == "cookie" {
				st.Fields[i].Value += "; " + hf.Value
				return
			}
		}
	}
	st.Fields = append(st.Fields, Field{hf.Name, hf.Value})
}
