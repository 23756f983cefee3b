package l7

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/internal/compress"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/h2"
	"github.com/switchyard/switchyard/internal/tlsconf"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
)

// The goroutine engine: one goroutine per client connection over a net.Conn, for TLS
// listeners (crypto/tls needs a net.Conn), `event_loops: -1`, and what the event loops hand
// over (streamed uploads, host-name backends, h2c and h2 pools). It is a thin I/O layer over
// the request core (request.go and package core): it reads a head into the connection's
// buffer, lets the core parse, route and admit it, writes the core's upstream head with the
// buffered body in one write, and streams the response back with the core's framing. A body
// still arriving streams up on a second goroutine while the response streams down (full
// duplex).
//
// Whatever the core does not serve goes, at a request boundary and with the bytes already read,
// to net/http (guard + http.Server + ReverseProxy) for the rest of the connection: HTTP/1.0,
// upgrades, Expect: 100-continue, absolute-form targets, anything net/http would refuse or
// answer itself (bad paths, no route) and sticky pools (cookies); a connection that starts with
// the h2c preface goes to the HTTP/2 engine instead (handOff, engine_h2.go).

// goConn is one client connection on the goroutine engine.
type goConn struct {
	*clientConn
	c      net.Conn
	active atomic.Bool // inside a request (Shutdown waits) rather than idle between requests
	// pinned: an event loop handed this connection over; it is not moved back (tlsToLoop).
	pinned bool
	engine engineKind // engineGoroutine, or engineH2 for an HTTP/2 stream's request
	t      tries      // the current request's attempts (tries.go)
	h1     h1Leg      // the leg to HTTP/1.1 pools, kept so a request allocates none
	// an HTTP/2 upstream's response (forward_h2.go): its body's read buffer, and the bytes and
	// spans its head (rhead) points into
	relay    []byte
	webFrame []byte // a gRPC-Web response's trailers frame (grpcweb.go)
	// webTrailers: the gRPC-Web response relayed ends with its trailers as a frame
	webTrailers bool
	rheadBuf    []byte
	rspans      [][3]int
	// the response's encoder when the route compresses it (compress.go), what it wrote, and
	// that framed as chunks for an HTTP/1.1 client
	enc      compress.Writer
	encFlush bool // flush what each read gave (a body of unknown length)
	encOut   bytes.Buffer
	encFrame []byte
	// held is the length of the response start (head and the encoder's first bytes) waiting
	// in gc.out for the encoder's next output (startResponse), 0 when none is
	held int
}

// serveConn serves one accepted (for TLS: handshaken, not h2) connection on the goroutine
// engine, handing it to fb's http.Server when the core cannot serve it. The connection was
// admitted (s.conns) and counted in s.pending by the caller.
func (s *Server) serveConn(c net.Conn, scheme string, fb *h1.Handover) {
	gc := &goConn{clientConn: newClientConn(s, c, c.RemoteAddr(), scheme, fb), c: c, engine: engineGoroutine}
	if tc, ok := c.(*tls.Conn); ok && gc.certHeader != nil {
		st := tc.ConnectionState()
		gc.certSubject = []byte(tlsconf.ClientSubject(&st))
	}
	gc.in = h1.Reader{Conn: c, Buf: make([]byte, 4<<10)}
	tracked := s.track(gc, true)
	s.pending.Add(-1)
	if !tracked {
		c.Close()
		s.conns.Done()
		return
	}
	gc.serve()
}

// track registers (on) or forgets a goroutine-engine connection for Shutdown and Close; it
// refuses new ones once the server is closing (a graceful shutdown still serves them once).
func (s *Server) track(gc *goConn, on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		if s.hard.Load() {
			return false
		}
		s.fconns[gc] = struct{}{}
	} else {
		delete(s.fconns, gc)
	}
	return true
}

// closeFast closes the goroutine-engine and loop connections: all of them, or only those
// between requests. It returns how many are left.
func (s *Server) closeFast(all bool) int {
	now := time.Now()
	s.mu.Lock()
	for gc := range s.fconns {
		if all || (!gc.active.Load() && gc.mayCloseIdle(now)) {
			gc.c.Close()
		}
	}
	n := len(s.fconns)
	s.mu.Unlock()
	return n + s.closeLoops(all) + s.closeH2(all) + int(s.pending.Load())
}

func (gc *goConn) serve() {
	handedOff := false
	defer func() {
		gc.s.track(gc, false)
		if !handedOff {
			gc.c.Close()
			gc.s.conns.Done()
		}
	}()
	// While shutting down a connection still gets one request answered (with Connection: close).
	for first := true; first || !gc.s.shutting.Load(); first = false {
		end, err := gc.readRequestHead(gc.s.state.Load().cfg)
		// Loaded after the wait: a reload while the connection was idle applies to this request,
		// and an idle connection does not keep a replaced configuration alive.
		st := gc.s.state.Load()
		if err != nil {
			if errors.Is(err, h1.ErrHeadTooLarge) {
				gc.refuse(errHeadTooLong)
			}
			return
		}
		if rej := h1.ParseHead(gc.in.Buffered()[:end], &gc.head); rej != nil {
			gc.refuse(rej)
			return
		}
		if end > st.cfg.Limits.MaxHeaderBytes {
			gc.refuse(errHeadTooLong)
			return
		}
		keep, fallback := gc.handle(st, end)
		if fallback {
			handedOff = gc.handOff()
			return
		}
		if !keep {
			return
		}
		// A TLS connection that stays open goes on to an event loop after its first request.
		if gc.s.tlsToLoop(gc) {
			handedOff = true
			return
		}
	}
}

// refuse answers a refused head, with a write deadline.
func (gc *goConn) refuse(r *h1.Rejection) {
	_ = gc.c.SetWriteDeadline(time.Now().Add(time.Second))
	gc.clientConn.refuse(r)
}

// handOff gives the connection, with the unconsumed bytes, to the net/http path.
func (gc *goConn) handOff() bool {
	pre := append([]byte(nil), gc.in.Buffered()...)
	_ = gc.c.SetDeadline(time.Time{})
	if bytes.HasPrefix(pre, h2.PrefaceLine) && gc.s.h2cOn(gc.fallback) {
		// h2c with prior knowledge: the h2 engine takes the connection (engine_h2.go).
		gc.s.track(gc, false)
		gc.s.serveH2(&h2cConn{h1.PrefixConn{Conn: gc.c, Pre: pre}}, gc.scheme, nil, nil, nil)
		gc.s.conns.Done()
		return true
	}
	if gc.requests.Load() <= 1 && !isHTTP1Line(pre) && gc.s.h2cOn(gc.fallback) {
		// The first bytes of a connection on an h2c listener that are neither an HTTP/1.x
		// request line nor the HTTP/2 preface: the client may be an HTTP/2 one with a broken
		// preface, which must be a connection error (RFC 9113 3.4), and would read an
		// HTTP/1.1 400 as frames. Closed without an answer, as the h2 engine closes a
		// connection whose preface is wrong after "PRI * HTTP/2.0".
		gc.s.onReject(gc.raddr, errNotHTTP)
		return false
	}
	conn := h1.Guard(&h1.PrefixConn{Conn: gc.s.conns.Track(gc.c), Pre: pre},
		gc.s.state.Load().cfg.Limits.MaxHeaderBytes, gc.s.onReject)
	return gc.fallback.Deliver(conn)
}

// errNotHTTP counts a connection closed because its first line was not HTTP/1.x (nor h2c).
var errNotHTTP = &h1.Rejection{Status: 400, Reason: "neither an HTTP/1.x request line nor the HTTP/2 connection preface"}

// isHTTP1Line reports whether the request line at the start of b (after any empty lines) ends
// in an HTTP/1.x version, whatever else is wrong with it (net/http answers that with a 400).
func isHTTP1Line(b []byte) bool {
	b = bytes.TrimLeft(b, "\r\n")
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	b = bytes.TrimSuffix(b, []byte("\r"))
	sp := bytes.LastIndexByte(b, ' ')
	return sp > 0 && bytes.HasPrefix(b[sp+1:], []byte("HTTP/1."))
}

// readRequestHead waits for the next request head: idle timeout until its first byte, then the
// read-header timeout for the rest. Empty lines before a request line are skipped (RFC 9112 2.2).
func (gc *goConn) readRequestHead(cfg *Config) (int, error) {
	// Copied so that the wait below does not keep cfg (and a replaced configuration) alive.
	idle, readHeader, maxHead := cfg.Timeouts.Idle, cfg.Timeouts.ReadHeader, cfg.Limits.MaxHeaderBytes
	for {
		b := gc.in.Buffered()
		i := 0
		for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
			i++
		}
		gc.in.Consume(i)
		if gc.in.R < gc.in.W {
			break
		}
		// Between requests only while nothing is buffered: a connection handed over with its
		// request read is busy, and Shutdown's sweep must not close it as idle.
		gc.active.Store(false)
		gc.in.SetDeadline(time.Now().Add(idle))
		if err := gc.in.Fill(maxHead); err != nil {
			return 0, err
		}
	}
	gc.active.Store(true)
	if end := h1.HeadEnd(gc.in.Buffered(), 0); end >= 0 {
		return end, nil
	}
	gc.in.SetDeadline(time.Now().Add(readHeader))
	return gc.in.ReadHead(maxHead)
}

// handle serves one request whose head (end bytes) is buffered. keep reports that the
// connection may serve another request; fallback that net/http must take the connection over,
// starting with this request.
func (gc *goConn) handle(st *state, end int) (keep, fallback bool) {
	rq, ok := gc.route(st, time.Now())
	if !ok {
		return false, true
	}
	// From here the request is ours.
	gc.s.served.add(gc.engine) // before any response byte, so a client that got one sees the count
	gc.in.Consume(end)
	deadline := rq.start.Add(rq.rt.timeout)
	gc.in.SetDeadline(deadline)
	if ok, keep := gc.admit(&rq, &gc.t); !ok {
		return keep, false
	}
	gc.h1 = h1Leg{gc: gc, rq: &rq, p: rq.rt.pool, until: deadline}
	var lg leg = &gc.h1
	if rq.rt.pool.h2up != nil {
		lg = gc.newH2Leg(&rq, deadline)
	}
	code, n, keep := gc.forward(&rq, lg)
	gc.stopEncoding() // a response cut short leaves its encoder behind
	gc.finish(rq.rt, &rq, &gc.t, code, n)
	gc.h1 = h1Leg{}
	return keep && !rq.RI.Close, false
}

var (
	errClientGone = errors.New("client connection failed")
	errClientBody = errors.New("read request body from client")
)

// isWriteErr reports an error from writing the request, not reading the response.
func isWriteErr(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "write"
}

// bufferBody puts the request body bytes already read after the head into gc.reqBuf and reports
// whether that is the whole body.
func (gc *goConn) bufferBody(rb *core.RequestBody) (bodyLen int, done bool, rej *h1.Rejection) {
	if rb.Done() {
		return 0, true, nil
	}
	n, out, rej := rb.Next(gc.in.Buffered())
	if rej != nil {
		return 0, false, rej
	}
	gc.reqBuf = append(gc.reqBuf, out...)
	gc.in.Consume(n)
	return n, rb.Done(), nil
}

// requestTrailers are the trailer fields an HTTP/2 stream's request ended with (none for an
// HTTP/1.1 client, whose chunked trailers its body's framing carries).
func (gc *goConn) requestTrailers() []h1.Field {
	if gc.stream == nil {
		return nil
	}
	tr := gc.stream.RequestTrailers()
	out := make([]h1.Field, len(tr))
	for i, f := range tr {
		out[i] = h1.Field{Name: []byte(f.Name), Value: []byte(f.Value)}
	}
	return out
}

// leg is how the goroutine engine speaks to a pool's backends: HTTP/1.1 on the core's
// connections (h1Leg), or streams on its HTTP/2 connections (h2Leg, forward_h2.go). It runs the
// exchange's steps (exchange.go) with blocking calls; forward takes them in the exchange's order.
type leg interface {
	// prepare builds the request and buffers the body bytes already read, reporting their
	// length and whether that is the whole body, or the client's malformed framing.
	prepare() (bodyLen int, whole bool, rej *h1.Rejection)
	// connect gets a connection to b (xConnect): an idle one, or a new one when fresh.
	connect(b *balance.Backend, fresh bool) error
	// send sends the request head and the body held, and starts streaming the rest of a body
	// still arriving (xSend).
	send() error
	// await waits for the final response head (xAwait; interim ones go to the client as they
	// come), returning its status and, for a gRPC call's trailers-only answer, its grpc-status.
	await() (code int, grpcStatus string, err error)
	// abandon ends the current attempt, a failed one or one whose response is dropped unread,
	// closing what it holds; reused and gotBytes describe its connection (tries.failed).
	abandon() (reused, gotBytes bool)
	// relay streams the response to the client (xRelay); keep: both connections stay usable.
	relay(t *tries) (code int, n int64, keep bool)
	// done releases what the leg holds once the exchange is over.
	done()
	// deadline is the request's total time (a gRPC call's may be shorter).
	deadline() time.Time
}

// forward runs the goroutine engine's exchange over lg from the first backend begin picked, one
// step after another in the exchange's order (tries.after). It returns the status (499 when the
// client went away), the body bytes sent and whether the client connection stays usable.
func (gc *goConn) forward(rq *routed, lg leg) (int, int64, bool) {
	defer lg.done()
	bodyLen, whole, rej := lg.prepare()
	gc.t.hold(whole, whole && rq.retry.Replayable(rq.Method, int64(bodyLen), whole), lg.deadline())
	gc.t.failover = &gc.failover
	if rej != nil {
		return gc.refuseBody(rej), 0, false
	}
	var failure error
	var o outcome
	for s := xConnect; ; s = gc.t.after(s, o, time.Now()) {
		o = outcome{}
		switch s {
		case xConnect:
			o.err = lg.connect(gc.t.backend(), gc.t.fresh)
		case xSend:
			o.err = lg.send()
		case xAwait:
			o.code, o.grpcStatus, o.err = lg.await()
		case xRetry:
			lg.abandon()
		case xRelay:
			return lg.relay(&gc.t)
		case xAnswer:
			code, keep := gc.answerFailure(failure, whole)
			return code, 0, keep
		}
		if o.err != nil {
			failure = o.err
			o.reused, o.gotBytes = lg.abandon()
		}
	}
}

// requestBody starts the request body of gc.head for an upstream that reads HTTP/1.1 framing
// (framed as the client framed it, or, for an HTTP/2 stream without a length, whose DATA
// carries no framing, chunked by the core), or, with payload, for one that frames the data
// itself (HTTP/2).
func (gc *goConn) requestBody(payload bool) core.RequestBody {
	switch {
	case gc.stream != nil && gc.head.Chunked:
		return core.NewStreamBody(payload)
	case payload:
		return core.NewRequestPayload(&gc.head)
	}
	return core.NewRequestBody(&gc.head)
}

// h1Leg sends requests to an HTTP/1.1 pool on the core's connections (upstream.go): the head
// and the buffered body in one write; a body still arriving streams up on its own goroutine
// while the response streams down (full duplex).
type h1Leg struct {
	gc     *goConn
	rq     *routed
	p      *pool
	until  time.Time // the request's total time
	rb     core.RequestBody
	whole  bool
	uc     *upConn    // the current attempt's connection
	upload chan error // the streamed rest of the body's outcome (nil: sent whole)
}

func (l *h1Leg) deadline() time.Time { return l.until }

func (l *h1Leg) prepare() (int, bool, *h1.Rejection) {
	gc, rq := l.gc, l.rq
	gc.reqBuf = gc.upstreamHead(rq)
	l.rb = gc.requestBody(false)
	bodyLen, whole, rej := gc.bufferBody(&l.rb)
	if rej == nil {
		rq.rt.mirror.copy(gc.reqBuf, int64(bodyLen), whole)
	}
	l.whole = whole
	return bodyLen, whole, rej
}

// connect takes an idle connection to b from the pool's, or dials one (always when fresh).
func (l *h1Leg) connect(b *balance.Backend, fresh bool) error {
	uc, err := l.p.up.get(b, time.Now(), clientEnds{src: l.gc.raddr, dst: l.gc.c.LocalAddr()}, fresh)
	l.uc = uc
	return err
}

// send writes the request head and the buffered body part (gc.reqBuf) in one write. A body
// still arriving then streams up on its own goroutine while await waits for the response head,
// so a backend may answer before the upload ends (full duplex).
func (l *h1Leg) send() error {
	gc, uc := l.gc, l.uc
	if err := gc.sendHead(uc, l.p, l.until); err != nil || l.whole {
		return err
	}
	l.upload = make(chan error, 1)
	uc.SetDeadline(l.until) // an upload is bounded by the total timeout, not the header one
	go func() { l.upload <- gc.copyRequestBody(uc, &l.rb) }()
	return nil
}

// await reads the response head. When none comes while a body streams up, the upload's own
// failure (the client's malformed framing or its going away) is the error, not the backend's.
func (l *h1Leg) await() (int, string, error) {
	gc, uc := l.gc, l.uc
	if err := gc.awaitResponse(uc); err != nil {
		if l.upload != nil {
			uc.Conn.Close()
			uerr := <-l.upload
			l.upload = nil
			if rej := (*h1.Rejection)(nil); errors.As(uerr, &rej) || errors.Is(uerr, errClientBody) {
				return 0, "", uerr
			}
		}
		return 0, "", err
	}
	code, _ := core.StatusCode(gc.rhead.Line)
	return code, "", nil
}

// abandon closes the attempt's connection: one that failed, or whose response is not read, is
// never pooled.
func (l *h1Leg) abandon() (reused, gotBytes bool) {
	uc := l.uc
	if uc == nil {
		return false, false
	}
	l.uc = nil
	uc.Conn.Close()
	if l.upload != nil {
		<-l.upload
		l.upload = nil
	}
	return uc.reused, uc.W != 0
}

func (l *h1Leg) done() {}

// relay streams the response whose head is in gc.rhead to the client. The upstream connection
// goes back to the pool as soon as the response has been read from it, before the last write to
// the client: a client's next request then finds it idle.
func (l *h1Leg) relay(t *tries) (int, int64, bool) {
	gc, uc, upload := l.gc, l.uc, l.upload
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
			l.p.up.put(uc, time.Now())
		}
	}
	code, n, cerr := gc.copyResponse(uc, l.rq.Method, l.until, finish)
	if errors.Is(uploadErr, errClientBody) {
		cerr = uploadErr
	}
	t.relayed(code, cerr)
	if cerr != nil {
		if clientCaused(cerr) {
			return 499, n, false
		}
		return code, n, false
	}
	return code, n, true
}

// sendHead writes the request head and the buffered body part in one write.
func (gc *goConn) sendHead(uc *upConn, p *pool, deadline time.Time) error {
	hd := time.Now().Add(p.cfg.Timeouts.Header)
	if hd.After(deadline) {
		hd = deadline
	}
	uc.SetDeadline(hd)
	_, err := uc.Conn.Write(gc.reqBuf)
	return err
}

// copyRequestBody streams the rest of a request body to the upstream, framed by rb (the one
// request-direction body function of this engine). If the upstream stops taking it, the rest
// is still read from the client so the connection stays in step; a client read error aborts
// the upstream.
func (gc *goConn) copyRequestBody(uc *upConn, rb *core.RequestBody) error {
	var werr error
	size := len(gc.in.Buf)
	for {
		if len(gc.in.Buffered()) == 0 {
			if err := gc.in.Fill(size); err != nil {
				if last, ok := rb.End(gc.requestTrailers()); ok && errors.Is(err, io.EOF) {
					if werr == nil {
						_, werr = uc.Conn.Write(last)
					}
					return werr
				}
				uc.Conn.Close() // the backend must not take a truncated body as complete
				return errClientBody
			}
		}
		n, out, rej := rb.Next(gc.in.Buffered())
		if rej != nil {
			uc.Conn.Close() // the backend must not take the body as complete
			return errors.Join(errClientBody, rej)
		}
		if werr == nil {
			_, werr = uc.Conn.Write(out)
		}
		gc.in.Consume(n)
		if rb.Done() {
			return werr
		}
	}
}

// awaitResponse reads the response head into gc.rhead; heads of interim (1xx) responses are
// forwarded to the client as they come.
func (gc *goConn) awaitResponse(uc *upConn) error {
	for {
		end, err := uc.ReadHead(64 << 10)
		if err != nil {
			return err
		}
		if rej := h1.ParseHead(uc.Buffered()[:end], &gc.rhead); rej != nil {
			return errors.Join(core.ErrUpstream, rej)
		}
		code, ok := core.StatusCode(gc.rhead.Line)
		if !ok || code == http.StatusSwitchingProtocols {
			return errors.Join(core.ErrUpstream, errors.New("bad status line"))
		}
		if code >= 200 {
			return nil
		}
		gc.responseTokens()
		err = gc.sendInterim(code)
		uc.Consume(end)
		if err != nil {
			return errors.Join(errClientGone, err)
		}
	}
}

// copyResponse writes the response head and streams the body, framed by the core (the one
// response-direction body function of this engine). It calls finish exactly once, as soon as
// the upstream side is done, saying whether the upstream connection can be reused.
func (gc *goConn) copyResponse(uc *upConn, method string, deadline time.Time, finish func(keep bool)) (code int, n int64, err error) {
	finished := false
	release := func(keep bool) {
		if !finished {
			finished = true
			finish(keep)
		}
	}
	defer release(false)
	end := max(h1.HeadEnd(uc.Buffered(), 0), 0) // awaitResponse left a whole head buffered
	code, _ = core.StatusCode(gc.rhead.Line)
	fr := core.ResponseFraming(method, code, &gc.rhead)
	upClose := gc.responseTokens()
	uc.Consume(end)
	cl := gc.rhead.ContentLength // the backend's: startEncoding drops it from the client's head
	clientFr, decode := gc.startEncoding(code, fr)
	body := &gc.body
	body.Reset(fr, cl, decode)
	// take consumes the buffered body bytes and returns what goes to the client for them.
	take := func() []byte {
		k, out, terr := body.Next(uc.Buffered())
		if terr != nil {
			err = terr
		}
		n += int64(k)
		uc.Consume(k)
		return out
	}
	reusable := func() bool {
		return core.Reusable(core.ResponseEnd{Framing: fr, Complete: body.Done(), UpstreamClose: upClose,
			Leftover: len(uc.Buffered()), Err: err})
	}
	// The first write carries the head and whatever body bytes arrived with it.
	var first []byte
	if !body.Done() && len(uc.Buffered()) > 0 {
		first = take()
	}
	gc.startResponse(code, clientFr, first)
	if body.Done() {
		release(reusable())
	}
	if werr := gc.sendStart(); werr != nil {
		return code, n, errors.Join(errClientGone, werr)
	}
	if !body.Done() {
		// The rest of the body is bounded by the total timeout, no longer the header timeout.
		uc.SetDeadline(deadline)
	}
	for !body.Done() && err == nil {
		if rerr := uc.Fill(len(uc.Buf)); rerr != nil {
			if errors.Is(rerr, io.EOF) {
				if last, ok := body.End(); ok {
					release(false)
					if werr := gc.sendBody(last); werr != nil {
						return code, n, errors.Join(errClientGone, werr)
					}
					return code, n, nil
				}
			}
			return code, n, errors.Join(core.ErrUpstream, rerr)
		}
		data := take()
		if len(data) == 0 && !body.Done() {
			continue // the end (a last chunk alone, decoded to no data) must still be sent
		}
		if body.Done() {
			// data still points into uc's buffer: copy it out (after a held head) before the
			// connection is reused.
			gc.out = append(gc.out[:gc.held], data...)
			data = gc.out[gc.held:]
			release(reusable())
		}
		if werr := gc.sendBody(data); werr != nil {
			return code, n, errors.Join(errClientGone, werr)
		}
	}
	return code, n, err
}

// The client side of an exchange: HTTP/1.1 bytes on the connection (the core's heads and
// framing), or, for an HTTP/2 stream's request, HEADERS, DATA and trailer frames.

// sendInterim forwards the interim (1xx) response whose head is in gc.rhead.
func (gc *goConn) sendInterim(code int) error {
	if gc.stream != nil {
		return gc.stream.Respond(gc.h2ResponseHead(code), nil, false)
	}
	_, err := gc.c.Write(gc.responseHead(code, core.NoBody))
	return err
}

// startResponse puts the final response's head (from gc.rhead) and the body bytes that came
// with it into gc.out (and gc.block on HTTP/2), copied out of the upstream connection's buffer,
// which a released connection no longer owns; sendStart sends them.
func (gc *goConn) startResponse(code int, fr core.Framing, first []byte) {
	if gc.stream != nil {
		gc.h2ResponseHead(code)
		gc.out = append(gc.out[:0], gc.encodeBody(first)...)
		return
	}
	gc.out = append(gc.responseHead(code, fr), gc.encodeBody(first)...)
	gc.held = 0
	if gc.enc != nil && !gc.encFlush && len(gc.out) < postponeOutput {
		// A sized body still being compressed: the head (and the coding's header) waits for
		// the encoder's next output (sendBody), so a small body's whole response is one
		// write, one wake-up of the client, not two. A stream's encoder flushes each read:
		// nothing waits.
		gc.held = len(gc.out)
	}
}

// postponeOutput is how much of a held response start (startResponse) is gathered before
// it is sent with the body unfinished: a segment, as nginx's postpone_output.
const postponeOutput = 1460

// sendStart sends what startResponse prepared, unless it is held for the encoder's output.
func (gc *goConn) sendStart() error {
	if gc.stream != nil {
		return gc.h2Send(gc.block, gc.out)
	}
	if gc.held > 0 {
		return nil
	}
	_, err := gc.c.Write(gc.out)
	return err
}

// sendBody sends response body bytes (framed by gc.body for HTTP/1.1, or compressed); while
// the response start is held, they join it until it is a segment or the body is done.
func (gc *goConn) sendBody(data []byte) error {
	data = gc.encodeBody(data)
	if gc.stream != nil {
		return gc.h2Send(nil, data)
	}
	if gc.held > 0 {
		gc.out = append(gc.out[:gc.held], data...) // data is the encoder's, not in gc.out
		if gc.held = len(gc.out); gc.held < postponeOutput && !gc.body.Done() {
			return nil
		}
		data, gc.held = gc.out, 0
	}
	if len(data) == 0 {
		return nil
	}
	_, err := gc.c.Write(data)
	return err
}

// h2Send sends the response head (block, when not nil) or body bytes on the stream; once
// gc.body is done the stream ends, with the body's trailers when it has any.
func (gc *goConn) h2Send(block, data []byte) error {
	done := gc.body.Done()
	trailers := gc.body.Trailers()
	end := done && len(trailers) == 0
	var err error
	switch {
	case block != nil:
		err = gc.stream.Respond(block, data, end)
	case len(data) > 0 || end:
		err = gc.stream.Data(data, end)
	}
	if err != nil || !done || end {
		return err
	}
	return gc.stream.Trailers(gc.h2Trailers(trailers))
}
