package l7

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/route"
)

// The HTTP/1.1 fast path. net/http's server and transport cost a background read goroutine per
// connection, a read and write goroutine per upstream connection, hand-offs between them and a
// header map per message; under keep-alive load that was three quarters of the proxy's CPU. The
// fast path owns the client connection instead: one goroutine parses each request head once
// (the guard's parser, so smuggling shapes are refused by the same code), routes, balances,
// writes the rewritten head and a buffered body to a pooled upstream connection in one write,
// and streams the response back with its framing, all from reused buffers.
//
// Whatever it does not handle it hands over, at a request boundary and with the bytes it has
// already read, to the net/http path (guard + http.Server + ReverseProxy) for the rest of the
// connection: h2c, HTTP/1.0, upgrades, Expect: 100-continue, absolute-form targets, anything
// net/http would refuse or answer itself (bad paths, no route), retried routes (they may need
// a buffered body and a second backend), sticky pools (cookies) and h2/h2c pools.

// fastConn is one client connection served on the fast path.
type fastConn struct {
	s        *Server
	c        net.Conn  // nil on the event loop, which owns a raw descriptor instead
	w        io.Writer // where proxy-made answers go: c, or the event loop's send buffer
	raddr    net.Addr
	in       h1.Reader
	scheme   string
	remote   string
	clientIP string
	fallback *h1.Handover
	active   atomic.Bool // inside a request (Shutdown waits) rather than idle between requests
	// clientClose: the client asked to close after this response (Connection: close).
	clientClose bool

	head     h1.Head
	rhead    h1.Head
	req      http.Request // reused for matching and balancing
	url      url.URL
	lastHost []byte
	tokens   [][]byte // Connection header tokens of the message being copied
	out      []byte   // upstream request head (and buffered body); then the response head
	chunk    h1.Chunked
	framed   []byte // a chunked response body's canonical framing (h1.Chunked output)
	upBody   []byte // the same for a request body streamed up on its own goroutine

	// the last requests_total series used, so steady traffic does no label lookup
	mRoute *routeRT
	mBack  *balance.Backend
	mCode  int
	mCount prometheus.Counter
}

// serveFast accepts connections on ln and serves them on the fast path; connections it cannot
// serve go to an http.Server (HTTP/1.1 with the guard, and h2c when allowed) on the same
// handler.
func (s *Server) serveFast(ln net.Listener, h2c bool, scheme string) error {
	fb := h1.NewHandover(ln.Addr())
	srv := s.httpServer(s, h2c, scheme)
	s.mu.Lock()
	s.lns = append(s.lns, ln, fb)
	s.mu.Unlock()
	go srv.Serve(fb)
	defer fb.Close()
	if tl, ok := ln.(*net.TCPListener); ok && !s.noLoops && s.startLoops() {
		err := s.serveLoop(tl, scheme, fb)
		if err == nil {
			return nil
		}
		s.log.Warn("l7 event loops refused the listener; serving a goroutine per connection", "error", err)
	}
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.shutting.Load() {
				return nil
			}
			// Out of descriptors and the like: back off instead of spinning, like net/http.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("l7 accept", "error", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		go s.serveConn(c, scheme, fb)
	}
}

// serveConn serves one accepted (for TLS: handshaken, not h2) connection on the fast path,
// handing it to fb's http.Server when the fast path cannot serve it.
func (s *Server) serveConn(c net.Conn, scheme string, fb *h1.Handover) {
	fc := newFastConn(s, c, c.RemoteAddr(), scheme, fb)
	if !s.track(fc, true) {
		c.Close()
		return
	}
	fc.in = h1.Reader{Conn: c, Buf: make([]byte, 4<<10)}
	fc.serve()
}

// newFastConn makes the per-connection state of the fast path; c is nil on the event loop.
func newFastConn(s *Server, c net.Conn, raddr net.Addr, scheme string, fb *h1.Handover) *fastConn {
	fc := &fastConn{s: s, c: c, w: c, raddr: raddr, scheme: scheme, fallback: fb, remote: raddr.String()}
	fc.req.RemoteAddr = fc.remote
	fc.clientIP = balance.ClientIP(&fc.req)
	return fc
}

// track registers (on) or forgets a fast-path connection for Shutdown and Close; it refuses
// new ones once shutting down.
func (s *Server) track(fc *fastConn, on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		if s.shutting.Load() {
			return false
		}
		s.fconns[fc] = struct{}{}
	} else {
		delete(s.fconns, fc)
	}
	return true
}

// closeFast closes the fast-path connections: all of them, or only those between requests.
func (s *Server) closeFast(all bool) int {
	s.mu.Lock()
	for fc := range s.fconns {
		if all || !fc.active.Load() {
			fc.c.Close()
		}
	}
	n := len(s.fconns)
	s.mu.Unlock()
	return n + s.closeLoops(all)
}

func (fc *fastConn) serve() {
	handedOff := false
	defer func() {
		fc.s.track(fc, false)
		if !handedOff {
			fc.c.Close()
		}
	}()
	for !fc.s.shutting.Load() {
		end, err := fc.readRequestHead(fc.s.state.Load().cfg)
		// Loaded after the wait: a reload while the connection was idle applies to this request,
		// and an idle connection does not keep a replaced configuration alive.
		st := fc.s.state.Load()
		if err != nil {
			if errors.Is(err, h1.ErrHeadTooLarge) {
				fc.refuse(errHeadTooLong)
			}
			return
		}
		if rej := h1.ParseHead(fc.in.Buffered()[:end], &fc.head); rej != nil {
			fc.refuse(rej)
			return
		}
		if end > st.cfg.Limits.MaxHeaderBytes {
			fc.refuse(errHeadTooLong)
			return
		}
		keep, fallback := fc.handle(st, end)
		if fallback {
			handedOff = fc.handOff()
			return
		}
		if !keep {
			return
		}
	}
}

// errHeadTooLong refuses a request head over limits.max_header_bytes.
var errHeadTooLong = &h1.Rejection{Status: 431, Reason: "request header fields too large"}

// refuse answers a refused head the way the guard does, and counts it.
func (fc *fastConn) refuse(r *h1.Rejection) {
	fc.s.onReject(fc.raddr, r)
	if fc.c != nil {
		_ = fc.c.SetWriteDeadline(time.Now().Add(time.Second))
	}
	_ = h1.WriteRejection(fc.w, r)
}

// handOff gives the connection, with the unconsumed bytes, to the net/http path.
func (fc *fastConn) handOff() bool {
	pre := append([]byte(nil), fc.in.Buffered()...)
	_ = fc.c.SetDeadline(time.Time{})
	conn := h1.Guard(&h1.PrefixConn{Conn: fc.c, Pre: pre}, fc.s.state.Load().cfg.Limits.MaxHeaderBytes, fc.s.onReject)
	return fc.fallback.Deliver(conn)
}

// readRequestHead waits for the next request head: idle timeout until its first byte, then the
// read-header timeout for the rest. Empty lines before a request line are skipped (RFC 9112 2.2).
func (fc *fastConn) readRequestHead(cfg *Config) (int, error) {
	fc.active.Store(false)
	// Copied so that the wait below does not keep cfg (and a replaced configuration) alive.
	idle, readHeader, maxHead := cfg.Timeouts.Idle, cfg.Timeouts.ReadHeader, cfg.Limits.MaxHeaderBytes
	for {
		b := fc.in.Buffered()
		i := 0
		for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
			i++
		}
		fc.in.Consume(i)
		if fc.in.R < fc.in.W {
			break
		}
		fc.in.SetDeadline(time.Now().Add(idle))
		if err := fc.in.Fill(maxHead); err != nil {
			return 0, err
		}
	}
	fc.active.Store(true)
	if end := h1.HeadEnd(fc.in.Buffered(), 0); end >= 0 {
		return end, nil
	}
	fc.in.SetDeadline(time.Now().Add(readHeader))
	return fc.in.ReadHead(maxHead)
}

// reqInfo is what handle learns from a request head's fields.
type reqInfo struct {
	host           []byte
	hosts          int
	close          bool
	teTrailers     bool
	xff            int // number of X-Forwarded-For fields
	forwarded, via []byte
	unsafe         bool // something net/http would refuse or handle specially
}

// inspectRequest scans the request's fields once.
func (fc *fastConn) inspectRequest() reqInfo {
	var ri reqInfo
	fc.tokens = fc.tokens[:0]
	for _, f := range fc.head.Fields {
		if !validValue(f.Value) {
			ri.unsafe = true
		}
		switch {
		case bytes.EqualFold(f.Name, hHost):
			ri.host = f.Value
			ri.hosts++
		case bytes.EqualFold(f.Name, hConnection):
			fc.tokens, ri.close = connectionTokens(fc.tokens, f.Value, ri.close)
		case bytes.EqualFold(f.Name, hExpect):
			ri.unsafe = true
		case bytes.EqualFold(f.Name, hTE):
			ri.teTrailers = ri.teTrailers || containsToken(f.Value, "trailers")
		case bytes.EqualFold(f.Name, hXFF):
			ri.xff++
		case bytes.EqualFold(f.Name, hForwarded):
			if ri.forwarded == nil {
				ri.forwarded = f.Value
			}
		case bytes.EqualFold(f.Name, hVia):
			if ri.via == nil {
				ri.via = f.Value
			}
		}
	}
	if ri.hosts != 1 || !validHost(ri.host) || fc.head.Upgrade ||
		(fc.head.Chunked && !bytes.EqualFold(fc.head.TransferEncoding, []byte("chunked"))) {
		ri.unsafe = true
	}
	return ri
}

// routed is a request the fast path serves itself, as its head describes it.
type routed struct {
	rt      *routeRT
	method  string
	target  []byte // the request target sent upstream (the cleaned path and the query)
	clean   string // the cleaned path
	ri      reqInfo
	start   time.Time
	hasBody bool
}

// route reads the request line and fields, cleans the path and matches a route. ok is false
// when net/http must take the request (see the list at the top of this file).
func (fc *fastConn) route(st *state, start time.Time) (rq routed, ok bool) {
	rq.start = start
	method, target, ok := parseRequestLine(fc.head.Line)
	if !ok {
		return rq, false
	}
	rq.method = method
	rq.ri = fc.inspectRequest()
	ri := &rq.ri
	if ri.unsafe {
		return rq, false
	}
	fc.clientClose = ri.close
	pathPart, query := target, []byte(nil)
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		pathPart, query = target[:q], target[q+1:]
	}
	// Paths with escapes or characters that need them take the url package's exact decoding;
	// plain ones (nearly all) are used as they are.
	rq.target = target
	if plainPath(pathPart) && plainQuery(query) {
		p := string(pathPart)
		c, err := route.NormalizePath(p, p)
		if err != nil {
			return rq, false
		}
		rq.clean = c
		if c != p {
			rq.target = appendTarget(nil, c, query)
		}
	} else {
		u, err := url.ParseRequestURI(string(target))
		if err != nil {
			return rq, false
		}
		c, err := route.NormalizePath(u.Path, u.EscapedPath())
		if err != nil {
			return rq, false
		}
		rq.clean = c
		rq.target = []byte((&url.URL{Path: c, RawQuery: u.RawQuery}).RequestURI())
	}

	fc.req.Method = method
	if !bytes.Equal(ri.host, fc.lastHost) || fc.req.Host == "" {
		fc.req.Host = string(ri.host)
		fc.lastHost = append(fc.lastHost[:0], ri.host...)
	}
	fc.url.Path = rq.clean
	fc.url.RawQuery = ""
	if len(query) > 0 {
		fc.url.RawQuery = string(query)
	}
	fc.req.URL = &fc.url
	if st.needHeaders {
		fc.req.Header = make(http.Header, len(fc.head.Fields))
		for _, f := range fc.head.Fields {
			fc.req.Header.Add(string(f.Name), string(f.Value))
		}
	} else {
		fc.req.Header = nil
	}
	m := st.table.Match(&fc.req, rq.clean)
	if m == nil {
		return rq, false
	}
	rq.rt = st.routes[m.Index]
	p := rq.rt.pool
	if p.up == nil || p.sticky != nil || fc.s.retryable(rq.rt, &fc.req) {
		return rq, false
	}
	rq.hasBody = fc.head.Chunked || fc.head.ContentLength > 0
	return rq, true
}

// admit takes the in-flight slots and the rate-limit token of a routed request and picks its
// backend. When one is refused it answers the client itself (503 or 429), releases what it took
// and returns nil; keep then says whether the connection can serve another request.
func (fc *fastConn) admit(st *state, rq *routed) (b *balance.Backend, keep bool) {
	s, rt, p := fc.s, rq.rt, rq.rt.pool
	closeConn := rq.hasBody || rq.ri.close
	if !st.global.TryAcquire() {
		s.metrics.shedGlobal.Inc()
		fc.errorResponse(http.StatusServiceUnavailable, "overloaded (proxy in-flight limit); retry later", true, closeConn)
		fc.observe(nil, nil, http.StatusServiceUnavailable, 0, rq.start, 0, rq.clean)
		return nil, !closeConn
	}
	if rt.limiter != nil && !rt.limiter.Allow(rt.keyOf(&fc.req)) {
		st.global.Release()
		rt.limitedCount.Inc()
		fc.out = append(fc.out[:0], "Retry-After: "...)
		fc.out = strconv.AppendInt(fc.out, int64(rt.limiter.RetryAfter().Seconds()+0.999), 10)
		fc.out = append(fc.out, "\r\n"...)
		fc.writeError(http.StatusTooManyRequests, "rate limit exceeded; slow down", fc.out, closeConn)
		fc.observe(rt, nil, http.StatusTooManyRequests, 0, rq.start, 0, rq.clean)
		return nil, !closeConn
	}
	if !p.gate.TryAcquire() {
		st.global.Release()
		p.shedCount.Inc()
		fc.errorResponse(http.StatusServiceUnavailable, "overloaded (pool "+p.name+" in-flight limit); retry later", true, closeConn)
		fc.observe(rt, nil, http.StatusServiceUnavailable, 0, rq.start, 0, rq.clean)
		return nil, !closeConn
	}
	p.budget.Request()
	if b = p.picker.Pick(&fc.req, nil); b == nil {
		p.gate.Release()
		st.global.Release()
		fc.writeError(http.StatusServiceUnavailable, "no available backend", []byte("Retry-After: 1\r\n"), closeConn)
		fc.observe(rt, nil, http.StatusServiceUnavailable, 0, rq.start, 0, rq.clean)
		return nil, !closeConn
	}
	s.metrics.inFlight.Inc()
	s.decisions.Add(1)
	b.Acquire()
	return b, true
}

// release gives back what admit took for a request sent to b.
func (fc *fastConn) release(st *state, rq *routed, b *balance.Backend) {
	b.Release()
	rq.rt.pool.gate.Release()
	fc.s.metrics.inFlight.Dec()
	st.global.Release()
}

// handle serves one request whose head (end bytes) is buffered. keep reports that the
// connection may serve another request; fallback that net/http must take the connection over,
// starting with this request.
func (fc *fastConn) handle(st *state, end int) (keep, fallback bool) {
	rq, ok := fc.route(st, time.Now())
	if !ok {
		return false, true
	}
	// From here the request is ours.
	fc.s.fastServed.Add(1) // before any response byte, so a client that got one sees the count
	fc.in.Consume(end)
	deadline := rq.start.Add(rq.rt.timeout)
	fc.in.SetDeadline(deadline)
	b, keep := fc.admit(st, &rq)
	if b == nil {
		return keep, false
	}
	defer fc.release(st, &rq, b)
	ex := exchange{route: rq.rt, backend: b, attempts: 1}
	code, n, keep := fc.forward(&ex, rq.method, rq.target, &rq.ri, deadline)
	fc.observe(rq.rt, b, code, n, rq.start, 1, rq.clean)
	return keep && !rq.ri.close, false
}

// forward sends the request to backend ex.backend and streams the response back. It returns the
// status (499 when the client went away), the body bytes sent and whether the client connection
// stays usable.
func (fc *fastConn) forward(ex *exchange, method string, target []byte, ri *reqInfo, deadline time.Time) (int, int64, bool) {
	p, b := ex.route.pool, ex.backend
	out := fc.buildUpstreamHead(method, target, ri)
	// The body part already read goes in the same write as the head; a body that is all there
	// can be replayed on a fresh connection when a pooled one turns out to be closed.
	var bodyDone bool
	var remaining int64
	switch {
	case fc.head.Chunked:
		fc.chunk = h1.Chunked{}
		framed, n, done, rej := fc.chunk.Append(out, fc.in.Buffered())
		if rej != nil {
			fc.s.onReject(fc.raddr, rej)
			fc.writeError(rej.Status, rej.Reason, nil, true)
			return rej.Status, 0, false
		}
		out = framed
		fc.in.Consume(n)
		bodyDone = done
	case fc.head.ContentLength > 0:
		n := min(int64(len(fc.in.Buffered())), fc.head.ContentLength)
		out = append(out, fc.in.Buffered()[:n]...)
		fc.in.Consume(int(n))
		remaining = fc.head.ContentLength - n
		bodyDone = remaining == 0
	default:
		bodyDone = true
	}
	fc.out = out

	var uc *upConn
	var err error
	for attempt := 0; ; attempt++ {
		uc, err = p.up.get(b, time.Now())
		if err != nil {
			break
		}
		err = fc.sendHead(uc, p, deadline)
		if err == nil && bodyDone {
			err = fc.awaitResponse(uc, method)
		}
		// A pooled connection the backend had closed fails before any response byte: try once
		// more on a new one when the request can be replayed (net/http's transport does the same).
		if err != nil && uc.reused && attempt == 0 && bodyDone && uc.W == 0 && (idempotent(method) || isWriteErr(err)) {
			uc.Conn.Close()
			continue
		}
		break
	}
	if err != nil {
		if uc != nil {
			uc.Conn.Close()
		}
		fc.s.passive(p, b, false)
		code, n, keep := fc.upstreamError(err, !bodyDone)
		// The unread rest of a body would be taken for the next request: close instead.
		return code, n, keep && bodyDone
	}

	// A body still arriving streams up on its own goroutine while the response streams down, so
	// a backend may answer before the upload ends (full duplex, like the net/http path).
	var upload chan error
	if !bodyDone {
		upload = make(chan error, 1)
		uc.SetDeadline(deadline) // an upload is bounded by the total timeout, not the header one
		go func() { upload <- fc.copyRequestBody(uc, remaining) }()
		if err := fc.awaitResponse(uc, method); err != nil {
			uc.Conn.Close()
			uerr := <-upload
			fc.s.passive(p, b, false)
			if rej := (*h1.Rejection)(nil); errors.As(uerr, &rej) {
				fc.s.onReject(fc.raddr, rej)
				fc.writeError(rej.Status, rej.Reason, nil, true)
				return rej.Status, 0, false
			}
			if errors.Is(uerr, errClientBody) {
				return 499, 0, false
			}
			return fc.upstreamError(err, false)
		}
	}
	// The upstream connection goes back to the pool as soon as the response has been read from
	// it, before the last write to the client: a client's next request then finds it idle.
	var uploadErr error
	finish := func(keep bool) {
		if !keep {
			uc.Conn.Close() // first, so an upload still writing to it stops
		}
		if upload != nil {
			if uploadErr = <-upload; uploadErr != nil && keep {
				keep = false
				uc.Conn.Close()
			}
		}
		if keep {
			p.up.put(b, uc, time.Now())
		}
	}
	code, n, cerr := fc.copyResponse(uc, method, deadline, finish)
	if errors.Is(uploadErr, errClientBody) {
		cerr = uploadErr
	}
	fc.s.passive(p, b, code < 500)
	if cerr != nil {
		if errors.Is(cerr, errClientGone) || errors.Is(cerr, errClientBody) {
			return 499, n, false
		}
		return code, n, false
	}
	return code, n, true
}

var (
	errClientGone = errors.New("client connection failed")
	errClientBody = errors.New("read request body from client")
	errUpstream   = errors.New("upstream response")
)

// isWriteErr reports an error from writing the request, not reading the response.
func isWriteErr(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "write"
}

// upstreamError answers an upstream failure before any response byte: 504 on a timeout, 502
// otherwise (like proxyError).
func (fc *fastConn) upstreamError(err error, closeConn bool) (int, int64, bool) {
	code, msg := http.StatusBadGateway, "upstream error"
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		code, msg = http.StatusGatewayTimeout, "upstream timeout"
	}
	fc.s.log.Debug("upstream error", "client", fc.remote, "error", err)
	if fc.writeError(code, msg, nil, closeConn || fc.clientClose) != nil {
		return 499, 0, false
	}
	return code, 0, true
}

// sendHead writes the request head and the buffered body part in one write.
func (fc *fastConn) sendHead(uc *upConn, p *pool, deadline time.Time) error {
	hd := time.Now().Add(p.cfg.Timeouts.Header)
	if hd.After(deadline) {
		hd = deadline
	}
	uc.SetDeadline(hd)
	_, err := uc.Conn.Write(fc.out)
	return err
}

// copyRequestBody streams the rest of a request body (Content-Length remaining, or chunked
// through fc.chunk) to the upstream. If the upstream stops taking it, the rest is still read
// from the client so the connection stays in step; a client read error aborts the upstream.
func (fc *fastConn) copyRequestBody(uc *upConn, remaining int64) error {
	var werr error
	size := len(fc.in.Buf)
	for {
		if len(fc.in.Buffered()) == 0 {
			if err := fc.in.Fill(size); err != nil {
				uc.Conn.Close() // the backend must not take a truncated body as complete
				return errClientBody
			}
		}
		data := fc.in.Buffered()
		var done bool
		used := len(data)
		if fc.head.Chunked {
			framed, n, d, rej := fc.chunk.Append(fc.upBody[:0], data)
			if rej != nil {
				uc.Conn.Close()
				return errors.Join(errClientBody, rej)
			}
			fc.upBody, data, used, done = framed, framed, n, d
		} else {
			data = data[:min(int64(len(data)), remaining)]
			used = len(data)
			remaining -= int64(len(data))
			done = remaining == 0
		}
		if werr == nil {
			_, werr = uc.Conn.Write(data)
		}
		fc.in.Consume(used)
		if done {
			return werr
		}
	}
}

// awaitResponse reads the response head into fc.rhead; heads of interim (1xx) responses are
// forwarded to the client as they come.
func (fc *fastConn) awaitResponse(uc *upConn, method string) error {
	for {
		end, err := uc.ReadHead(64 << 10)
		if err != nil {
			return err
		}
		if rej := h1.ParseHead(uc.Buffered()[:end], &fc.rhead); rej != nil {
			return errors.Join(errUpstream, rej)
		}
		code, ok := statusCode(fc.rhead.Line)
		if !ok || code == http.StatusSwitchingProtocols {
			return errors.Join(errUpstream, errors.New("bad status line"))
		}
		if code >= 200 {
			return nil
		}
		fc.responseTokens()
		head := fc.buildResponseHead(code, noBody)
		uc.Consume(end)
		if _, err := fc.c.Write(head); err != nil {
			return errors.Join(errClientGone, err)
		}
	}
}

// framing of a response body.
type framing int

const (
	noBody framing = iota
	lengthBody
	chunkedBody
	closeBody // ends when the upstream closes; sent to the client chunked
)

// copyResponse writes the response head and streams the body. It calls finish exactly once, as
// soon as the upstream side is done, saying whether the upstream connection can be reused.
func (fc *fastConn) copyResponse(uc *upConn, method string, deadline time.Time, finish func(keep bool)) (code int, n int64, err error) {
	finished := false
	release := func(keep bool) {
		if !finished {
			finished = true
			finish(keep)
		}
	}
	defer release(false)
	end := max(h1.HeadEnd(uc.Buffered(), 0), 0) // awaitResponse left a whole head buffered
	code, _ = statusCode(fc.rhead.Line)
	h := &fc.rhead
	fr := closeBody
	switch {
	case method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified:
		fr = noBody
	case h.Chunked:
		fr = chunkedBody
	case h.ContentLength >= 0:
		fr = lengthBody
	}
	upClose := fc.responseTokens()
	head := fc.buildResponseHead(code, fr)
	uc.Consume(end)

	// The first write carries the head and whatever body bytes arrived with it.
	remaining := h.ContentLength
	var chunk h1.Chunked
	done := fr == noBody
	take := func() []byte {
		data := uc.Buffered()
		used := len(data)
		switch fr {
		case lengthBody:
			data = data[:min(int64(len(data)), remaining)]
			used = len(data)
			remaining -= int64(len(data))
			done = remaining == 0
		case chunkedBody:
			framed, k, d, rej := chunk.Append(fc.framed[:0], data)
			if rej != nil {
				err = errors.Join(errUpstream, rej)
			}
			fc.framed, data, used, done = framed, framed, k, d
		}
		uc.Consume(used)
		return data
	}
	// Bytes beyond the response mean the backend is out of step: never reuse that connection.
	reusable := func() bool { return !upClose && fr != closeBody && len(uc.Buffered()) == 0 && err == nil }
	if !done && len(uc.Buffered()) > 0 {
		body := take()
		n += int64(len(body))
		if fr == closeBody {
			head = appendChunk(head, body)
		} else {
			head = append(head, body...)
		}
	}
	fc.out = head
	if done {
		release(reusable())
	}
	if _, werr := fc.c.Write(head); werr != nil {
		return code, n, errors.Join(errClientGone, werr)
	}
	if !done {
		// The rest of the body is bounded by the total timeout, no longer the header timeout.
		uc.SetDeadline(deadline)
	}
	for !done && err == nil {
		if rerr := uc.Fill(len(uc.Buf)); rerr != nil {
			if fr == closeBody && errors.Is(rerr, io.EOF) {
				release(false)
				if _, werr := fc.c.Write([]byte("0\r\n\r\n")); werr != nil {
					return code, n, errors.Join(errClientGone, werr)
				}
				return code, n, nil
			}
			return code, n, errors.Join(errUpstream, rerr)
		}
		body := take()
		if len(body) == 0 {
			continue
		}
		n += int64(len(body))
		if done {
			// body still points into uc's buffer: copy it out before the connection is reused.
			fc.out = append(fc.out[:0], body...)
			body = fc.out
			release(reusable())
		}
		var werr error
		if fr == closeBody {
			fc.out = appendChunk(fc.out[:0], body)
			_, werr = fc.c.Write(fc.out)
		} else {
			_, werr = fc.c.Write(body)
		}
		if werr != nil {
			return code, n, errors.Join(errClientGone, werr)
		}
	}
	return code, n, err
}

// appendChunk appends data as one chunk of a chunked body.
func appendChunk(dst, data []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(data)), 16)
	return append(append(append(dst, "\r\n"...), data...), "\r\n"...)
}

// observe records metrics and the access log line of a fast-path request, with pre-resolved
// series so steady traffic allocates nothing here.
func (fc *fastConn) observe(rt *routeRT, b *balance.Backend, code int, n int64, start time.Time, attempts int, path string) {
	s := fc.s
	elapsed := time.Since(start)
	if fc.mCount == nil || fc.mRoute != rt || fc.mBack != b || fc.mCode != code {
		routeName, poolName, backend := "", "", ""
		if rt != nil {
			routeName, poolName = rt.cfg.Name, rt.pool.name
		}
		if b != nil {
			backend = b.Address
		}
		fc.mRoute, fc.mBack, fc.mCode = rt, b, code
		fc.mCount = s.metrics.requests.WithLabelValues(routeName, poolName, backend, strconv.Itoa(code))
	}
	fc.mCount.Inc()
	if rt != nil {
		rt.durationObs.Observe(elapsed.Seconds())
	} else {
		s.metrics.duration.WithLabelValues("", "").Observe(elapsed.Seconds())
	}
	if s.access != nil {
		routeName, poolName, backend := "", "", ""
		if rt != nil {
			routeName, poolName = rt.cfg.Name, rt.pool.name
		}
		if b != nil {
			backend = b.Address
		}
		s.access.LogAttrs(context.Background(), slog.LevelInfo, "request",
			slog.String("client", fc.remote), slog.String("method", fc.req.Method), slog.String("host", fc.req.Host),
			slog.String("path", path), slog.String("proto", "HTTP/1.1"), slog.Int("status", code),
			slog.Int64("bytes", n), slog.Duration("duration", elapsed), slog.String("route", routeName),
			slog.String("pool", poolName), slog.String("backend", backend), slog.Int("attempts", attempts))
	}
}

// errorResponse writes a proxy-made answer; shed ones carry the load-shedding headers.
func (fc *fastConn) errorResponse(code int, msg string, shed, closeConn bool) {
	var extra []byte
	if shed {
		extra = []byte("Retry-After: 1\r\nX-Load-Shed: 1\r\n")
	}
	fc.writeError(code, msg, extra, closeConn)
}

// writeError writes what http.Error would: a plain-text body with the message.
func (fc *fastConn) writeError(code int, msg string, extra []byte, closeConn bool) error {
	buf := make([]byte, 0, 256)
	buf = append(buf, "HTTP/1.1 "...)
	buf = strconv.AppendInt(buf, int64(code), 10)
	buf = append(append(append(buf, ' '), statusText(code)...), "\r\n"...)
	buf = append(buf, "Content-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\n"...)
	buf = append(buf, extra...)
	if closeConn {
		buf = append(buf, "Connection: close\r\n"...)
	}
	buf = append(buf, "Content-Length: "...)
	buf = strconv.AppendInt(buf, int64(len(msg)+1), 10)
	buf = append(append(append(buf, "\r\n\r\n"...), msg...), '\n')
	_, err := fc.w.Write(buf)
	return err
}

func statusText(code int) string {
	if t := http.StatusText(code); t != "" {
		return t
	}
	return "status code " + strconv.Itoa(code)
}
