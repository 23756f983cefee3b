package fastpath

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/edge/store"
	"github.com/switchyard/switchyard/internal/connlimit"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/h2"
)

// Limits of fast-path connections of its own; the listener's are in Config.
const (
	fastLinger      = 500 * time.Millisecond // net/http's rstAvoidanceDelay
	fastCopyBody    = 32 << 10               // larger bodies go out with writev, not copied
	fastInitialRead = 4 << 10
)

// Cache is what the fast path needs from the edge.
type Cache interface {
	// ServeHTTP answers a request through the cache's full path (misses, revalidations, stale
	// entries, ranges...), on the fast connection's own response writer.
	http.Handler
	// FreshHit returns the fresh memory hit, at now, for a GET or HEAD of a plain target and
	// host, reading the fields a URL varies on from req; ok is false when there is none (a miss,
	// a body on disk only, a stale entry, a pass-through URL, the RTT endpoint).
	FreshHit(now time.Time, host, target []byte, req Fields) (ent *store.Entry, age time.Duration, ok bool)
	// LabelHit sets the fields that mark a stored header as a hit's (X-Cache, Via...); Age is
	// written per answer by the fast path.
	LabelHit(h http.Header)
	// TierAuthentic reports whether a Config.TierHeader value authenticates a lower tier.
	TierAuthentic(v []byte) bool
	// ServedHit counts a hit answered here; size is its body length (0 for HEAD).
	ServedHit(host []byte, fromTier, head bool, size int64)
	// ServedOwn counts a request answered here through ServeHTTP.
	ServedOwn()
	// Lent counts a request net/http answered alone.
	Lent()
}

// Fields reads a request's header fields by name (an interface, not a func, so that a hit
// allocates nothing to pass it).
type Fields interface {
	// Fields returns the fields named (canonical names), as a header valid until the next call.
	Fields(names []string) http.Header
}

// Config is the listener's limits and the edge's connection and logging hooks.
type Config struct {
	// MaxHead bounds a request head; a longer one is handed over (net/http applies its own limit).
	MaxHead int
	// Idle is how long a connection may wait for its next request; ReadHeader how long a head
	// may take once its first byte came; ClientTimeout bounds writing one response.
	Idle, ReadHeader, ClientTimeout time.Duration
	// TierHeader is the field a lower tier marks its requests with (Cache.TierAuthentic).
	TierHeader string
	// Raw returns the connection writev reaches (under the edge's counting wrapper); Cut makes
	// the close of a connection whose write timed out a reset.
	Raw func(net.Conn) net.Conn
	Cut func(net.Conn)
	// Warn logs rate-limited warnings (accept errors); Log the rest.
	Warn func(msg string, args ...any)
	Log  *slog.Logger
	// H2C serves a connection whose first bytes are the HTTP/2 client preface (h2c with prior
	// knowledge), given with the bytes already read; nil leaves it to net/http (a 505).
	H2C func(net.Conn)
	// AltSvc, when set, is advertised on every hit (an Alt-Svc field after the others: the
	// HTTP/3 endpoint of a TLS listener).
	AltSvc string
}

// Server accepts connections for the fast path and hands connections over to the net/http
// server through its Fallback listener.
type Server struct {
	cache    Cache
	cfg      Config
	ln       net.Listener
	fallback *h1.Handover
	closing  atomic.Bool // stop accepting; close connections between requests
	hard     atomic.Bool // the grace is over: no connection is served any more

	mu    sync.Mutex
	conns map[*fastConn]struct{}
}

// New returns a fast path on ln; a net/http server must Serve its Fallback listener.
func New(cache Cache, ln net.Listener, cfg Config) *Server {
	return &Server{cache: cache, cfg: cfg, ln: ln, fallback: h1.NewHandover(ln.Addr()), conns: map[*fastConn]struct{}{}}
}

// Fallback is the listener of the connections (and single requests) net/http answers.
func (fs *Server) Fallback() net.Listener { return fs.fallback }

// Open is how many connections the fast path serves.
func (fs *Server) Open() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.conns)
}

// Closing reports that Close has begun: no more connections are accepted.
func (fs *Server) Closing() bool { return fs.closing.Load() }

// Serve accepts connections until the listener is closed.
func (fs *Server) Serve() {
	var backoff connlimit.AcceptBackoff
	for {
		c, err := fs.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || fs.closing.Load() {
				return
			}
			delay := backoff.Failed()
			fs.cfg.Warn("edge accept", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		backoff.Accepted()
		if fc := fs.admit(c); fc != nil {
			go fc.serve()
		}
	}
}

// ServeConn serves one connection accepted elsewhere (a TLS connection, handshaken, that chose
// HTTP/1.1) until it closes or is handed over; a Server that only serves such connections is
// made by New on the listener they come from, and its Serve is not called.
func (fs *Server) ServeConn(c net.Conn) {
	if fc := fs.admit(c); fc != nil {
		fc.serve()
	}
}

// admit tracks a new connection, or closes it once the server no longer serves any.
func (fs *Server) admit(c net.Conn) *fastConn {
	fc := &fastConn{fs: fs, c: c, born: time.Now()}
	if tc, ok := c.(*tls.Conn); ok {
		st := tc.ConnectionState()
		fc.tls = &st
	}
	if !fs.track(fc, true) {
		c.Close()
		return nil
	}
	return fc
}

// track registers (on) or forgets a connection; it refuses new ones once the grace is over (one
// accepted while closing still gets its request answered: after an upgrade the old process
// accepts from the listener it shares with the new one until it closes its copy).
func (fs *Server) track(fc *fastConn, on bool) bool {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if !on {
		delete(fs.conns, fc)
		return true
	}
	if fs.hard.Load() {
		return false
	}
	fs.conns[fc] = struct{}{}
	return true
}

// closeConns closes the fast-path connections (all, or only those between requests) and returns
// how many were still open.
func (fs *Server) closeConns(all bool) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	now := time.Now()
	for fc := range fs.conns {
		if all || (!fc.active.Load() && (fc.served.Load() > 0 || now.Sub(fc.born) >= fastNewConnGrace)) {
			fc.c.Close()
		}
	}
	return len(fs.conns)
}

// Close stops accepting, closes idle connections at once and gives those inside a request up to
// grace to finish their response. Handed-over connections belong to the net/http server.
func (fs *Server) Close(grace time.Duration) {
	fs.closing.Store(true)
	fs.ln.Close()
	deadline := time.Now().Add(grace)
	for fs.closeConns(false) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	fs.hard.Store(true)
	fs.closeConns(true)
}

// fastNewConnGrace is how long close lets a connection that has not sent its first request take
// to send it: it may be on its way, and no client retries a request on a fresh connection that
// was reset. (Idle connections that have served one are closed at once; clients retry those.)
const fastNewConnGrace = time.Second

// fastConn is one client connection served on the fast path.
type fastConn struct {
	fs     *Server
	c      net.Conn
	tls    *tls.ConnectionState // of a TLS connection, for its requests (nil: plain)
	active atomic.Bool          // inside a request (close waits for it) rather than idle
	born   time.Time            // accepted at
	served atomic.Int64         // request heads read

	in h1.Reader // heads are parsed in place in its buffer

	head    h1.Head
	closing bool        // the response just written carried Connection: close
	out     []byte      // the response being written, reused
	pend    []byte      // fastWriter's body bytes before its head is decided, reused
	vary    http.Header // the request fields a URL varies on, reused
	// wdeadline is the write deadline in force (client_timeout), re-armed lazily.
	wdeadline time.Time
}

var errFastHeadTooLarge = errors.New("request head too large for the fast path")

func (fc *fastConn) serve() {
	handedOff, lingering := false, false
	defer func() {
		if lingering {
			fc.linger()
		}
		fc.fs.track(fc, false)
		if !handedOff {
			fc.c.Close()
		}
	}()
	fc.in = h1.Reader{Conn: fc.c, Buf: make([]byte, fastInitialRead)}
	// While closing a connection still gets one request answered.
	for first := true; first || !fc.fs.closing.Load(); first = false {
		end, err := fc.readHead()
		if first && err == nil && fc.fs.cfg.H2C != nil && bytes.HasPrefix(fc.in.Buffered(), h2.PrefaceLine) {
			handedOff = true
			fc.fs.track(fc, false) // the HTTP/2 connection shuts down on its own (GOAWAY)
			_ = fc.c.SetReadDeadline(time.Time{})
			fc.fs.cfg.H2C(&h1.PrefixConn{Conn: fc.c, Pre: append([]byte(nil), fc.in.Buffered()...)})
			return
		}
		if errors.Is(err, errFastHeadTooLarge) {
			handedOff = fc.handOff() // net/http answers it with its own limit
			return
		}
		if err != nil {
			return
		}
		switch fc.serveHit(end) {
		case fastKeep:
		case fastOwn:
			keep, ok := fc.serveOwn(end)
			switch {
			case !ok && fc.lendable():
				if !fc.lend(end) {
					return
				}
			case !ok:
				handedOff = fc.handOff()
				return
			case !keep:
				lingering = fc.closing
				return
			}
		case fastLend:
			if !fc.lend(end) {
				return
			}
		case fastHandOff:
			handedOff = fc.handOff()
			return
		default:
			lingering = fc.closing
			return
		}
	}
}

// fastOutcome is what became of one request on the fast path.
type fastOutcome int

const (
	fastKeep    fastOutcome = iota // answered here; the connection reads the next request
	fastClose                      // answered here; the connection closes
	fastOwn                        // answered here through Cache.ServeHTTP (fastmiss.go)
	fastLend                       // net/http answers this request alone (lend.go)
	fastHandOff                    // net/http takes the connection for good
)

// linger half-closes the connection after a "Connection: close" response and waits (at most
// fastLinger) for the client to close its side, as net/http does: closing at once with request
// bytes still unread makes the kernel reset the connection, and a reset can destroy the response
// before the client has read it.
func (fc *fastConn) linger() {
	cw, ok := fc.c.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = fc.c.SetReadDeadline(time.Now().Add(fastLinger))
	buf := fc.in.Buf[:cap(fc.in.Buf)]
	for {
		if _, err := fc.c.Read(buf); err != nil {
			return
		}
	}
}

// handOff gives the connection, with the bytes read but not consumed, to the net/http server,
// screened by h1's guard so that it reads heads and chunked bodies by the same rule.
func (fc *fastConn) handOff() bool {
	pre := append([]byte(nil), fc.in.Buffered()...)
	_ = fc.c.SetReadDeadline(time.Time{})
	return fc.fs.fallback.Deliver(h1.Guard(&h1.PrefixConn{Conn: fc.c, Pre: pre}, fc.fs.cfg.MaxHead, nil))
}

// readHead waits for the next whole request head at the start of the buffer and returns its
// length: the idle timeout until its first byte, then the read-header timeout.
func (fc *fastConn) readHead() (int, error) {
	fc.active.Store(false)
	if len(fc.in.Buffered()) == 0 {
		fc.in.SetReadDeadline(time.Now().Add(fc.fs.cfg.Idle))
		if err := fc.in.Fill(fc.fs.cfg.MaxHead); err != nil {
			return 0, err
		}
	}
	fc.active.Store(true)
	fc.served.Add(1)
	if end := h1.HeadEnd(fc.in.Buffered(), 0); end >= 0 {
		return end, nil
	}
	fc.in.SetReadDeadline(time.Now().Add(fc.fs.cfg.ReadHeader))
	end, err := fc.in.ReadHead(fc.fs.cfg.MaxHead)
	if errors.Is(err, h1.ErrHeadTooLarge) {
		return 0, errFastHeadTooLarge
	}
	return end, err
}

// hitRequest is what the fast path needs from a request head it may answer.
type hitRequest struct {
	head   bool // HEAD rather than GET
	target []byte
	host   []byte
	close  bool // Connection: close
	// fromTier is true when a lower-tier edge asks (Config.TierHeader).
	fromTier bool
}

// inspect reads a parsed head and reports whether the fast path may answer it: GET or HEAD,
// HTTP/1.1, a plain origin-form target, one plain Host, no body, and no field that asks for
// more than a plain hit (ranges, preconditions, request cache directives, expectations).
func (fc *fastConn) inspect() (hitRequest, bool) {
	var hr hitRequest
	h := &fc.head
	line := h.Line
	switch {
	case bytes.HasPrefix(line, []byte("GET ")):
		line = line[4:]
	case bytes.HasPrefix(line, []byte("HEAD ")):
		line, hr.head = line[5:], true
	default:
		return hr, false
	}
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || string(line[sp+1:]) != "HTTP/1.1" || !h1.PlainTarget(line[:sp]) {
		return hr, false
	}
	hr.target = line[:sp]
	if h.ContentLength >= 0 || h.Chunked || h.TransferEncoding != nil || h.Upgrade {
		return hr, false
	}
	hosts, conns := 0, 0
	for _, f := range h.Fields {
		if h1.HasCTL(f.Value) {
			return hr, false // net/http refuses it: let it answer
		}
		n := f.Name
		switch {
		case bytes.EqualFold(n, []byte("Host")):
			hr.host = f.Value
			hosts++
		case bytes.EqualFold(n, []byte(fc.fs.cfg.TierHeader)):
			hr.fromTier = fc.fs.cache.TierAuthentic(f.Value) // a lower tier asks: counted in the upper role
		case bytes.EqualFold(n, []byte("Connection")):
			// net/http looks at the first Connection field only; two are left to it.
			hr.close = h1.HasToken(f.Value, "close")
			conns++
		case len(n) > 3 && bytes.EqualFold(n[:3], []byte("If-")),
			bytes.EqualFold(n, []byte("Range")),
			bytes.EqualFold(n, []byte("Cache-Control")),
			bytes.EqualFold(n, []byte("Pragma")),
			bytes.EqualFold(n, []byte("Expect")):
			return hr, false
		}
	}
	return hr, hosts == 1 && conns <= 1 && h1.PlainHost(hr.host)
}

// serveHit answers the request whose head (end bytes) is buffered when it is a fresh memory hit.
// Otherwise, with nothing consumed or written, it says who is to answer it: the fast path through
// the cache's full path (fastOwn: misses, revalidations, stale entries...), net/http alone
// (fastLend) for the odd shapes ownable leaves to it, else net/http with the rest of the
// connection (fastHandOff).
func (fc *fastConn) serveHit(end int) fastOutcome {
	if b := fc.in.Buffered()[0]; b == '\r' || b == '\n' {
		return fastHandOff // leading empty lines: net/http's reading of them is the reference
	}
	if h1.ParseHead(fc.in.Buffered()[:end], &fc.head) != nil {
		return fastHandOff // net/http answers malformed heads its own way
	}
	keep, ok := fc.answerHit(end)
	switch {
	case !ok && fc.ownable():
		return fastOwn
	case !ok && fc.lendable():
		return fastLend
	case !ok:
		return fastHandOff
	case keep:
		return fastKeep
	}
	return fastClose
}

// answerHit answers the parsed request when it is a fresh memory hit. ok is false, with nothing
// consumed or written, when net/http must answer it; keep reports that the connection may serve
// another request.
func (fc *fastConn) answerHit(end int) (keep, ok bool) {
	hr, ok := fc.inspect()
	if !ok {
		return false, false
	}
	// h1.PlainTarget guarantees that the target is what net/http's URL.RequestURI() gives back
	// for it, so the cache finds the entry its full path would.
	now := time.Now()
	ent, age, ok := fc.fs.cache.FreshHit(now, hr.host, hr.target, fc)
	if !ok {
		return false, false
	}
	hh := fc.fs.hitHeadOf(ent)
	if hh == nil {
		return false, false
	}
	return fc.sendHit(end, &hr, ent, hh, age, now), true
}

// sendHit answers hr from the fresh memory hit ent: it consumes the request's end bytes, writes
// hh's prebuilt head with the fields that change per answer (Age, Date, Connection) and the
// body, and reports whether the connection may serve another request. It is apart from
// answerHit because from here the request is ours: nothing after this may hand it to net/http.
func (fc *fastConn) sendHit(end int, hr *hitRequest, ent *store.Entry, hh *hitHead, age time.Duration, now time.Time) (keep bool) {
	var err error
	fc.in.Consume(end)
	fc.fs.cache.ServedHit(hr.host, hr.fromTier, hr.head, int64(len(ent.Body)))
	out := append(fc.out[:0], hh.pre...)
	out = append(out, "Age: "...)
	out = strconv.AppendInt(out, min(int64(age/time.Second), 1<<31), 10)
	out = append(out, "\r\n"...)
	out = append(out, hh.post...)
	// net/http's own fields follow the handler's, in its order: Date, Content-Type, Connection.
	if hh.date {
		out = append(out, "Date: "...)
		out = now.UTC().AppendFormat(out, http.TimeFormat)
		out = append(out, "\r\n"...)
	}
	if hh.sniffed != "" && !hr.head {
		out = append(out, "Content-Type: "...)
		out = append(out, hh.sniffed...)
		out = append(out, "\r\n"...)
	}
	if hr.close {
		out = append(out, "Connection: close\r\n"...)
	}
	if alt := fc.fs.cfg.AltSvc; alt != "" {
		out = append(append(append(out, "Alt-Svc: "...), alt...), "\r\n"...)
	}
	out = append(out, "\r\n"...)
	// A client that reads too slowly is cut off after client_timeout, as net/http's is. The
	// deadline is re-armed only when less than 7/8 of the timeout is left (a slow reader is cut
	// between 7/8 and all of it): arming a timer on every hit costs measurable time.
	if timeout := fc.fs.cfg.ClientTimeout; fc.wdeadline.Sub(now) < timeout-timeout/8 {
		fc.wdeadline = now.Add(timeout)
		err = fc.c.SetWriteDeadline(fc.wdeadline)
	}
	switch body := ent.Body; {
	case err != nil:
	case hr.head || len(body) == 0:
		_, err = fc.c.Write(out)
	case len(body) <= fastCopyBody:
		out = append(out, body...)
		_, err = fc.c.Write(out)
	default:
		// One writev: the stored body is immutable, so it is sent without a copy.
		bufs := net.Buffers{out, body}
		_, err = bufs.WriteTo(fc.fs.cfg.Raw(fc.c))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		fc.fs.cfg.Cut(fc.fs.cfg.Raw(fc.c)) // a slow reader: reset on close, drop what the kernel still holds
	}
	fc.out = out
	fc.closing = err == nil && hr.close
	return err == nil && !hr.close
}

// Fields returns the request's fields named by a URL's Vary, as the header variantKey reads.
func (fc *fastConn) Fields(names []string) http.Header {
	if fc.vary == nil {
		fc.vary = http.Header{}
	}
	clear(fc.vary)
	for _, f := range fc.head.Fields {
		for _, n := range names {
			if len(n) == len(f.Name) && bytes.EqualFold(f.Name, []byte(n)) {
				fc.vary[n] = append(fc.vary[n], string(f.Value))
			}
		}
	}
	return fc.vary
}

// hitHead is the pre-rendered head of a stored response served as a HIT, split around Age, the
// one field that changes per request. It is exactly what net/http writes for the same response:
// the status line, then the header fields sorted by name (rendered by http.Header.Write, net/http's
// own writer), then the fields net/http adds itself.
type hitHead struct {
	pre     []byte  // status line and the fields sorting before "Age"
	post    []byte  // the fields sorting after "Age", X-Cache and Via among them
	date    bool    // the stored response has no Date: net/http adds the current one
	sniffed string  // no Content-Type (and no Content-Encoding): net/http sniffs one for a body
	h2      h2Cache // the HPACK form, for HTTP/2 hits (h2hit.go)
}

// hitHeadOf returns the entry's hit head, rendering it on first use; nil when the fast path does
// not serve this entry (bodyless or unusual statuses, a Content-Length that is not the body's).
func (fs *Server) hitHeadOf(ent *store.Entry) *hitHead {
	if hh, ok := ent.Memo().(*hitHead); ok {
		return hh
	}
	hh := fs.storedHitHead(ent) // hithead.go: kept with the entry in the store's arena
	ent.SetMemo(hh)
	if hh.pre == nil {
		return nil
	}
	return hh
}

// renderHitHead renders ent's hit head; nil when the fast path does not serve it.
func (fs *Server) renderHitHead(ent *store.Entry) *hitHead {
	m := ent.Meta
	text := http.StatusText(m.Status)
	if !bodyAllowed(m.Status) || text == "" {
		return nil
	}
	if cl := m.Header["Content-Length"]; len(cl) != 1 || cl[0] != strconv.Itoa(len(ent.Body)) {
		return nil
	}
	for _, k := range []string{"Connection", "Transfer-Encoding"} {
		if _, ok := m.Header[k]; ok {
			return nil // net/http would treat these specially; never stored, but be exact
		}
	}
	before, after := http.Header{}, http.Header{}
	for k, vv := range m.Header {
		switch {
		case k == "Age" || k == "X-Cache":
		case k < "Age":
			before[k] = vv
		default:
			after[k] = vv
		}
	}
	fs.cache.LabelHit(after)
	delete(after, "Age")
	var pre, post bytes.Buffer
	pre.WriteString("HTTP/1.1 " + strconv.Itoa(m.Status) + " " + text + "\r\n")
	if before.Write(&pre) != nil || after.Write(&post) != nil {
		return nil
	}
	hh := &hitHead{pre: pre.Bytes(), post: post.Bytes()}
	_, hasDate := m.Header["Date"]
	hh.date = !hasDate
	if _, ok := m.Header["Content-Type"]; !ok && m.Header.Get("Content-Encoding") == "" && len(ent.Body) > 0 {
		hh.sniffed = http.DetectContentType(ent.Body)
	}
	return hh
}
