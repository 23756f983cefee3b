// Package h2 is switchyard's HTTP/2 server connection (RFC 9113): the connection preface,
// settings, flow control both ways, stream states, GOAWAY, and the guards against the known
// floods (rapid reset, CVE-2023-44487; CONTINUATION floods; control frame floods). It reads
// frames with golang.org/x/net/http2's Framer and decodes header blocks with its hpack
// decoder, but is not x/net's server: one reader goroutine per connection reads and
// dispatches frames, every stream's frames go to one write buffer that a writer goroutine
// sends in one write per flush, and each request runs its Handler on a goroutine of its own
// (blocking upstream I/O), so nothing per frame crosses a channel; a request Config.Inline can
// answer at once (the edge's cache hits) is answered on the reader instead.
//
// The package knows nothing of proxying: package l7 turns each Stream into an HTTP/1.1
// exchange through the request core.
package h2

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Config tunes a connection.
type Config struct {
	// MaxConcurrentStreams is SETTINGS_MAX_CONCURRENT_STREAMS; streams past it are refused.
	MaxConcurrentStreams uint32
	// MaxHeaderBytes bounds a request's decoded header list (SETTINGS_MAX_HEADER_LIST_SIZE);
	// a larger one is answered 431 by the handler (Stream.TooLarge). The compressed block may
	// be at most twice that, in at most 64 frames, or the connection is closed.
	MaxHeaderBytes int
	// IdleTimeout closes (with GOAWAY) a connection without open streams for this long.
	IdleTimeout time.Duration
	// PrefaceTimeout bounds the wait for the client's connection preface.
	PrefaceTimeout time.Duration
	// WriteTimeout bounds one write to the client.
	WriteTimeout time.Duration
	// ResetsPerSecond is how many streams per second the client may cancel (RST_STREAM) while
	// they run, with a burst of twice that, before the connection is closed with
	// ENHANCE_YOUR_CALM (rapid reset, CVE-2023-44487).
	ResetsPerSecond int
	// OnMalformed is told of each malformed request (a stream error PROTOCOL_ERROR).
	OnMalformed func(reason string)
	// Inline, when set, is offered each new stream whose request ended with its headers, on the
	// connection's reader goroutine before a goroutine is given it: a cache hit is answered
	// there without the hand-over (a channel send and a goroutine's wake-up per stream). It
	// must not wait for anything: it answers with Stream.TryRespond only and reports whether
	// it answered; when it did not, with nothing sent, the Handler runs as usual.
	Inline func(*Stream) bool
	// ExtendedConnect offers extended CONNECT (RFC 8441: SETTINGS_ENABLE_CONNECT_PROTOCOL),
	// so clients can run WebSocket over a stream; the handler sees Stream.Protocol.
	ExtendedConnect bool
}

// Handler serves one request stream, on a goroutine of its own; when it returns the stream
// is finished (see Stream.finish).
type Handler func(*Stream)

const (
	streamWindow = 256 << 10 // SETTINGS_INITIAL_WINDOW_SIZE we announce
	connWindow   = 1 << 20   // the connection receive window we keep open
	maxFrameSize = 16384     // we keep the default SETTINGS_MAX_FRAME_SIZE
	maxPending   = 1 << 20   // buffered output past which control floods are refused
	maxEmpty     = 512       // empty DATA/CONTINUATION frames allowed per connection
)

// Conn is one server connection.
type Conn struct {
	nc      net.Conn
	cfg     Config
	handler Handler
	br      *bufio.Reader
	fr      *http2.Framer
	dec     *hpack.Decoder

	// reader goroutine only
	maxSeen    uint32 // highest client stream id seen
	block      []byte // the header block being assembled from HEADERS + CONTINUATION
	blockN     int    // its frames
	blockFrame *http2.HeadersFrame
	cur        *Stream // the stream a header block is decoded into (nil: trailers, into trail)
	trail      []Field // the trailer fields of the block being decoded
	curSize    int
	curBad     string
	empty      int
	tokens     float64
	lastReset  time.Time
	rdl        time.Time // the read deadline in effect (c.mu)

	mu          sync.Mutex
	wcond       *sync.Cond // the writer waits for output
	drained     *sync.Cond // streams wait for the writer to take the buffer
	wbuf, spare []byte
	streams     map[uint32]*Stream
	free        []*Stream
	idle        []chan *Stream // handler goroutines waiting for a stream
	sendWindow  int64          // connection send window
	initWindow  int64          // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerFrame   int            // the client's SETTINGS_MAX_FRAME_SIZE
	recvUsed    int            // connection receive window taken by the client and not yet returned
	recvUnacked int            // of that, bytes consumed (read or discarded) and due to be returned
	goingAway   bool           // GOAWAY sent or received: no new streams
	lastStream  uint32         // the last stream id a GOAWAY of ours let through
	started     uint32         // the highest stream id whose headers were taken (also set by the reader)
	closing     bool           // close once the buffer is written and no stream runs
	fatal       bool           // close once the buffer is written (a connection error)
	dead        bool           // the connection failed or was closed
	active      int            // streams whose handler runs
	resets      []uint32       // recently closed streams that ended in RST_STREAM (rememberReset)
	resetsNext  int
	done        chan struct{}
}

// PrefaceLine is the first line of the HTTP/2 client preface: what an HTTP/1.1 listener that
// also serves h2c with prior knowledge reads as a request line it does not serve.
var PrefaceLine = []byte("PRI * HTTP/2.0\r\n")

// NewConn makes a server connection over nc (its first bytes must be the client preface).
func NewConn(nc net.Conn, cfg Config, h Handler) *Conn {
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = 250
	}
	if cfg.ResetsPerSecond == 0 {
		cfg.ResetsPerSecond = 100
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	c := &Conn{nc: nc, cfg: cfg, handler: h, streams: map[uint32]*Stream{}, sendWindow: 65535,
		initWindow: 65535, peerFrame: 16384, done: make(chan struct{}), tokens: float64(2 * cfg.ResetsPerSecond)}
	c.wcond = sync.NewCond(&c.mu)
	c.drained = sync.NewCond(&c.mu)
	c.br = bufio.NewReaderSize(nc, 32<<10)
	c.fr = http2.NewFramer(nil, c.br)
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(maxFrameSize)
	c.dec = hpack.NewDecoder(4096, c.emit)
	c.dec.SetMaxStringLength(max(cfg.MaxHeaderBytes, 4096))
	return c
}

// Serve runs the connection until it ends; it closes nc.
func (c *Conn) Serve() {
	defer c.shut()
	if err := c.readPreface(); err != nil {
		return
	}
	c.mu.Lock()
	settings := []http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: c.cfg.MaxConcurrentStreams},
		{ID: http2.SettingInitialWindowSize, Val: streamWindow},
		{ID: http2.SettingMaxHeaderListSize, Val: uint32(c.cfg.MaxHeaderBytes)},
		{ID: http2.SettingHeaderTableSize, Val: 4096}}
	if c.cfg.ExtendedConnect {
		settings = append(settings, http2.Setting{ID: http2.SettingEnableConnectProtocol, Val: 1})
	}
	c.wbuf = appendSettings(c.wbuf, settings...)
	c.wbuf = appendWindowUpdate(c.wbuf, 0, connWindow-65535)
	c.mu.Unlock()
	go c.writeLoop()
	for {
		c.setReadDeadline()
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.readError(err)
			return
		}
		if err := c.dispatch(f); err != nil {
			c.connError(err)
			return
		}
	}
}

// readPreface reads the client connection preface (RFC 9113 3.4).
func (c *Conn) readPreface() error {
	if c.cfg.PrefaceTimeout > 0 {
		_ = c.nc.SetReadDeadline(time.Now().Add(c.cfg.PrefaceTimeout))
	}
	buf := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c.br, buf); err != nil {
		return fmt.Errorf("read connection preface: %w", err)
	}
	if string(buf) != http2.ClientPreface {
		return errors.New("read connection preface: not HTTP/2")
	}
	return nil
}

// setReadDeadline arms the idle timeout while no stream is open (lazily: a timer update only
// when the deadline moved by more than a second), and clears it while streams run: they have
// deadlines of their own.
func (c *Conn) setReadDeadline() {
	c.mu.Lock()
	c.idleDeadlineLocked()
	c.mu.Unlock()
}

// idleDeadlineLocked is setReadDeadline with c.mu held; finish calls it too, when the last
// stream ends while the reader waits.
func (c *Conn) idleDeadlineLocked() {
	if c.closing || c.dead {
		return // drainAndClose set the last deadline
	}
	var t time.Time
	if c.active == 0 && c.cfg.IdleTimeout > 0 {
		t = time.Now().Add(c.cfg.IdleTimeout)
	}
	if t.IsZero() == c.rdl.IsZero() && (t.IsZero() || t.Sub(c.rdl) < time.Second) {
		return
	}
	c.rdl = t
	_ = c.nc.SetReadDeadline(t)
}

// readError ends the connection after a failed frame read: a protocol error gets its GOAWAY.
func (c *Conn) readError(err error) {
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &ce):
		c.connError(err)
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.connError(http2.ConnectionError(http2.ErrCodeFrameSize))
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.Shutdown() // idle: a graceful GOAWAY
		}
	}
}

// connError sends GOAWAY with the error's code and closes the connection once it is written.
func (c *Conn) connError(err error) {
	code := http2.ErrCodeProtocol
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		code = http2.ErrCode(ce)
	}
	c.mu.Lock()
	c.goingAway = true
	if !c.fatal {
		c.wbuf = appendGoAway(c.wbuf, c.maxSeen, code)
	}
	c.closing, c.fatal = true, true
	c.wcond.Signal()
	c.mu.Unlock()
}

// Shutdown starts a graceful close: GOAWAY naming the last stream taken; streams already
// taken finish, later ones are refused, and the connection closes when the last one ends.
func (c *Conn) Shutdown() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.goingAway || c.dead {
		return
	}
	c.goingAway = true
	c.lastStream = c.started
	c.wbuf = appendGoAway(c.wbuf, c.lastStream, http2.ErrCodeNo)
	c.closing = true
	c.wcond.Signal()
}

// Close ends the connection at once, cutting running streams.
func (c *Conn) Close() {
	c.mu.Lock()
	c.killLocked()
	c.mu.Unlock()
}

// Open is the number of streams whose handler runs.
func (c *Conn) Open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.active
}

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

func (c *Conn) killLocked() {
	if c.dead {
		return
	}
	c.dead = true
	c.nc.Close()
	for _, st := range c.streams {
		st.wake()
	}
	for _, w := range c.idle {
		close(w)
	}
	c.idle = nil
	c.wcond.Broadcast()
	c.drained.Broadcast()
}

// shut ends the reader: the connection is dead for the streams and the writer.
func (c *Conn) shut() {
	c.mu.Lock()
	closing := c.closing && !c.dead
	c.mu.Unlock()
	if closing {
		// Let the writer send what is buffered (the GOAWAY) before the socket closes.
		select {
		case <-c.done:
		case <-time.After(time.Second):
		}
	}
	c.mu.Lock()
	c.killLocked()
	c.mu.Unlock()
}

// writeLoop sends the write buffer whenever it holds something: whatever the streams and the
// reader appended meanwhile goes out in one write.
func (c *Conn) writeLoop() {
	defer close(c.done)
	var wdl time.Time
	for {
		c.mu.Lock()
		for len(c.wbuf) == 0 && !c.dead && !(c.closing && (c.active == 0 || c.fatal)) {
			c.wcond.Wait()
		}
		if c.dead || len(c.wbuf) == 0 {
			if !c.dead && c.closing {
				c.drainAndClose()
			}
			c.mu.Unlock()
			return
		}
		// Let the streams that are ready to answer append first, so one write carries all of
		// them (waking for each frame made about one write per response): yield while the
		// buffer still grows, a few times at most.
		for i, n := 0, -1; i < 3 && len(c.wbuf) > n && len(c.wbuf) < 32<<10; i++ {
			n = len(c.wbuf)
			c.mu.Unlock()
			runtime.Gosched()
			c.mu.Lock()
			if c.dead {
				c.mu.Unlock()
				return
			}
		}
		buf := c.wbuf
		c.wbuf = c.spare[:0]
		c.spare = nil
		c.mu.Unlock()
		if now := time.Now(); now.Add(c.cfg.WriteTimeout).Sub(wdl) > time.Second {
			wdl = now.Add(c.cfg.WriteTimeout)
			_ = c.nc.SetWriteDeadline(wdl)
		}
		_, err := c.nc.Write(buf)
		c.mu.Lock()
		if cap(buf) <= 256<<10 {
			c.spare = buf[:0]
		}
		if err != nil {
			c.killLocked()
		}
		c.drained.Broadcast()
		c.mu.Unlock()
	}
}

// drainAndClose half-closes a connection whose last frame (GOAWAY) was written, so the client
// reads it before the close (closing with unread input would reset the connection and could
// lose it); the reader sees the client's close or times out. c.mu is held.
func (c *Conn) drainAndClose() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.nc.SetReadDeadline(time.Now().Add(time.Second))
		return
	}
	c.killLocked()
}
