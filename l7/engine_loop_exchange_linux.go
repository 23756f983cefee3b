//go:build linux

package l7

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/internal/compress"
	"github.com/switchyard/switchyard/internal/connlimit"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
)

// The event loop's request exchange: reading a request head, then the exchange's steps
// (exchange.go) as non-blocking I/O, each run when its socket is ready and ended in stepped,
// where the exchange's sequence (tries.after) names the next. The loop's mechanics (epoll,
// accepting, dealing connections out, writing to clients, deadlines) are in engine_loop_linux.go.

// readHead waits for a request head, then routes and admits it and starts its exchange.
func (l *evLoop) readHead(c *loopConn) bool {
	if !c.flush() {
		return false // the last response first: at most one is buffered per connection
	}
	st := l.s.state.Load()
	cfg := st.cfg
	b := c.in.Buffered()
	i := 0
	for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
		i++
	}
	c.in.Consume(i)
	end := -1
	switch {
	case len(c.in.Buffered()) > 0:
		if !c.started {
			c.started = true // the idle timeout gives way to the read-header one
			c.deadline = l.now.Add(cfg.Timeouts.ReadHeader)
		}
		end = h1.HeadEnd(c.in.Buffered(), 0)
	case l.s.shutting.Load() && !c.readable && c.mayCloseIdle(l.now):
		// Shutting down, between requests, nothing arrived: close. Not a connection with bytes
		// to read, nor one still to send its first request (accepted during the shutdown, or
		// just before): its request is on the way.
		l.abort(c, 0)
		return false
	}
	if end < 0 {
		if len(c.in.Buffered()) > cfg.Limits.MaxHeaderBytes {
			return l.refuse(c, errHeadTooLong)
		}
		if !c.readable {
			return false
		}
		n, err := c.read(cfg.Limits.MaxHeaderBytes + 4<<10)
		if errors.Is(err, h1.ErrHeadTooLarge) {
			return l.refuse(c, errHeadTooLong)
		}
		if err != nil {
			l.abort(c, 0)
			return false
		}
		return n > 0
	}
	if rej := h1.ParseHead(c.in.Buffered()[:end], &c.head); rej != nil {
		return l.refuse(c, rej)
	}
	if end > cfg.Limits.MaxHeaderBytes {
		return l.refuse(c, errHeadTooLong)
	}
	return l.startRequest(c, st, end)
}

// startRequest serves a parsed head of end bytes: the core routes and admits it, then the
// exchange starts, or the connection goes to a goroutine with what the loop does not serve.
func (l *evLoop) startRequest(c *loopConn, st *state, end int) bool {
	rq, ok := c.route(st, l.now)
	if !ok {
		l.handOff(c, true)
		return false
	}
	rb := core.NewRequestBody(&c.head)
	n, body, rej := rb.Next(c.in.Buffered()[end:])
	// A malformed chunk is judged by the goroutine engine, which answers it.
	whole := rb.Done() && rej == nil
	if !whole || !rq.rt.pool.ipOnly || rq.rt.pool.up == nil || rq.rt.pool.up.sendProxy != 0 || rq.rt.pool.up.tls != nil || c.coding != compress.Identity {
		// A body still arriving streams on the goroutine engine, whose dialer also resolves
		// host names, which holds the HTTP/2 pools' connections (forward_h2.go) and which
		// compresses responses (compress.go), keeps PROXY pools' connections per client and
		// speaks TLS to backends. Handed
		// over before admission, so the request is admitted once.
		l.handOff(c, false)
		return false
	}
	l.s.served.add(engineLoop) // the loop's from here, answered or refused, as on every engine
	if ok, keep := c.admit(&rq, &c.t); !ok {
		c.in.Consume(end)
		return l.endExchange(c, keep)
	}
	c.rq = rq
	c.started = false
	c.total = rq.start.Add(rq.rt.timeout)
	c.t.hold(true, rq.retry.Replayable(rq.Method, int64(n), true), c.total)
	c.t.usable, c.t.failover = l.usable, &c.failover
	c.reqBuf = append(c.upstreamHead(&rq), body...)
	rq.rt.mirror.copy(c.reqBuf, int64(n), true)
	c.in.Consume(end + n)
	c.sent, c.code, c.n = 0, 0, 0
	c.phase, c.x = phExchange, xConnect
	return true
}

// refuse answers a refused request head and closes the connection.
func (l *evLoop) refuse(c *loopConn, r *h1.Rejection) bool {
	c.refuse(r)
	c.phase = phDrain
	c.deadline = l.now.Add(time.Second)
	return true
}

// handOff moves a client connection, with its buffered bytes, to a goroutine: net/http's
// (toHTTP) or the goroutine engine. The connection stays counted against max_connections.
func (l *evLoop) handOff(c *loopConn, toHTTP bool) {
	// Counted while between engines (forgotten by the loop, not yet tracked), so that a
	// Shutdown does not finish in that window and cut the connection it was about to serve.
	l.s.pending.Add(1)
	defer l.s.pending.Add(-1)
	l.forget(c)
	f := os.NewFile(uintptr(c.fd), "")
	nc, err := net.FileConn(f) // a duplicate, on Go's poller
	f.Close()
	if err != nil {
		l.s.log.Warn("l7 hand over connection", "error", err)
		l.s.conns.Done()
		return
	}
	to := "fast"
	if toHTTP {
		to = "http"
	}
	l.s.metrics.handoffs.WithLabelValues(to).Inc()
	if c.tls != nil {
		nc = c.tlsToGoroutine(nc)
	}
	// pinned: a connection the loop could not serve stays on its goroutine.
	gc := &goConn{clientConn: c.clientConn, c: nc, pinned: true, engine: engineGoroutine}
	gc.w, gc.in.Conn = nc, nc
	gc.active.Store(true) // its request is read already: busy, not idle, for Shutdown
	if !l.s.track(gc, true) {
		nc.Close()
		l.s.conns.Done()
		return
	}
	go func() {
		if !toHTTP {
			gc.serve()
			return
		}
		defer l.s.track(gc, false)
		if !gc.handOff() {
			nc.Close()
			l.s.conns.Done()
		}
	}()
}

// sockaddr returns the socket address of a backend given as ip:port, or nil for a host name.
func (l *evLoop) sockaddr(b *balance.Backend) unix.Sockaddr {
	if sa, ok := l.addrs[b]; ok {
		return sa
	}
	var sa unix.Sockaddr
	if ap, err := netip.ParseAddrPort(b.Address); err == nil && ap.Addr().Zone() == "" {
		if a := ap.Addr(); a.Is4() || a.Is4In6() {
			sa = &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.Unmap().As4()}
		} else {
			sa = &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
		}
	}
	if len(l.addrs) > 4096 {
		clear(l.addrs) // backends of configurations reloaded away
	}
	l.addrs[b] = sa
	return sa
}

// exchange runs the request's current step (c.x) as far as its sockets allow.
func (l *evLoop) exchange(c *loopConn) bool {
	switch c.x {
	case xConnect:
		return l.connect(c)
	case xSend:
		return l.sendRequest(c)
	case xAwait:
		return l.awaitHead(c)
	case xRetry:
		l.abandon(c) // the response is not read: its connection is closed
		return l.stepped(c, outcome{})
	case xRelay:
		return l.streamBody(c)
	case xAnswer:
		return l.answer(c)
	}
	return l.endExchange(c, true) // xDone
}

// stepped ends the current step as o: the exchange's sequence (tries.after) names the next,
// which starts here (its deadline; the response head to the client).
func (l *evLoop) stepped(c *loopConn, o outcome) bool {
	if o.err != nil {
		o.reused, o.gotBytes = l.abandon(c)
		c.failure = o.err
	}
	c.x = c.t.after(c.x, o, l.now)
	switch c.x {
	case xConnect:
		c.sent = 0
	case xSend:
		c.deadline = minTime(l.now.Add(c.rq.rt.pool.cfg.Timeouts.Header), c.total)
	case xRelay:
		l.startRelay(c)
	}
	return true
}

// abandon ends the current attempt: its upstream connection, if any, is closed (one that
// failed, or whose response is not read, is never pooled). reused and gotBytes describe it.
func (l *evLoop) abandon(c *loopConn) (reused, gotBytes bool) {
	u := c.u
	if u == nil {
		return false, false
	}
	c.u = nil
	l.closeUp(u)
	return u.reused, u.gotBytes
}

// connect gives the request an upstream connection: an idle one (unless the attempt must be on
// a new one) or a new one, once the backend has accepted it.
func (l *evLoop) connect(c *loopConn) bool {
	u := c.u
	if u == nil {
		b := c.t.backend()
		if !c.t.fresh {
			if u = l.takeIdle(b); u != nil {
				u.owner, u.reused, u.gotBytes = c, true, false
				c.u = u
				return l.stepped(c, outcome{})
			}
		}
		fd, err := l.dial(b)
		if err != nil {
			return l.stepped(c, outcome{err: err})
		}
		p := c.rq.rt.pool
		u = &loopUp{fd: fd, b: b, idleFor: p.cfg.Timeouts.Idle, maxIdle: p.cfg.MaxIdlePerBackend, owner: c,
			in: h1.Reader{Buf: make([]byte, 16<<10)}}
		for fd >= len(l.up) {
			l.up = append(l.up, make([]*loopUp, len(l.up)+64)...)
		}
		l.up[fd] = u
		c.u = u
		c.deadline = minTime(l.now.Add(p.cfg.Timeouts.Connect), c.total)
	}
	if !u.writable {
		return false
	}
	if errno, err := unix.GetsockoptInt(u.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || errno != 0 {
		if err == nil {
			err = syscall.Errno(errno)
		}
		return l.stepped(c, outcome{err: &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", err)}})
	}
	return l.stepped(c, outcome{})
}

// dial opens a non-blocking connection to b on the loop's epoll, counted against the server's
// descriptor budget until closeUp (a connection whose dial fails gives its place back here).
func (l *evLoop) dial(b *balance.Backend) (int, error) {
	if !l.s.conns.Take() {
		return -1, fmt.Errorf("dial %s: %w", b.Address, connlimit.ErrExhausted)
	}
	sa := l.sockaddr(b)
	family := unix.AF_INET
	if _, ok := sa.(*unix.SockaddrInet6); ok {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		l.s.conns.Give()
		return -1, fmt.Errorf("dial %s: %w", b.Address, err)
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
	err = unix.Connect(fd, sa)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		err = fmt.Errorf("dial %s: %w", b.Address, err)
	} else {
		err = l.ctl(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET, kindUpstream)
	}
	if err != nil {
		unix.Close(fd)
		l.s.conns.Give()
		return -1, err
	}
	return fd, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sendRequest writes the request head and body upstream.
func (l *evLoop) sendRequest(c *loopConn) bool {
	u := c.u
	for c.sent < len(c.reqBuf) {
		if !u.writable {
			return false
		}
		n, err := rawWrite(u.fd, c.reqBuf[c.sent:])
		switch {
		case err == unix.EAGAIN:
			u.writable = false
		case err != nil:
			return l.stepped(c, outcome{err: &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", err)}})
		default:
			c.sent += n
			if c.sent < len(c.reqBuf) {
				u.writable = false
			}
		}
	}
	return l.stepped(c, outcome{})
}

// awaitHead reads the response head; interim (1xx) heads go to the client as they come.
func (l *evLoop) awaitHead(c *loopConn) bool {
	u := c.u
	end := h1.HeadEnd(u.in.Buffered(), 0)
	if end < 0 {
		if !u.readable {
			return false
		}
		n, err := readInto(u.fd, &u.in, 64<<10+4<<10, &u.readable, u.hup)
		if err != nil {
			return l.stepped(c, outcome{err: err})
		}
		if n > 0 {
			u.gotBytes = true
		}
		return n > 0
	}
	if rej := h1.ParseHead(u.in.Buffered()[:end], &c.rhead); rej != nil {
		return l.stepped(c, outcome{err: errors.Join(core.ErrUpstream, rej)})
	}
	code, ok := core.StatusCode(c.rhead.Line)
	if !ok || code == http.StatusSwitchingProtocols {
		return l.stepped(c, outcome{err: errors.Join(core.ErrUpstream, errors.New("bad status line"))})
	}
	c.upClose = c.responseTokens()
	if code < 200 {
		head := c.responseHead(code, core.NoBody)
		u.in.Consume(end)
		c.send(head)
		return true
	}
	// The final head: its bytes are consumed (c.rhead still points into them, and they stay
	// in the buffer until the next read), what follows is the exchange's.
	u.in.Consume(end)
	c.code = code
	return l.stepped(c, outcome{code: code})
}

// startRelay sends the client the response head, with the body bytes that came with it.
func (l *evLoop) startRelay(c *loopConn) {
	u := c.u
	fr := core.ResponseFraming(c.rq.Method, c.code, &c.rhead)
	head := c.responseHead(c.code, fr)
	c.body.Reset(fr, c.rhead.ContentLength, false)
	c.respErr = nil
	if !c.body.Done() && len(u.in.Buffered()) > 0 {
		head = append(head, c.take()...)
	}
	c.out = head
	if c.body.Done() {
		l.responseTaken(c)
	}
	c.send(head)
	c.deadline = c.total
}

// dialable reports a backend the loop can connect to itself (given as an IP address).
func (l *evLoop) dialable(b *balance.Backend) bool { return l.sockaddr(b) != nil }

// responseTaken ends the upstream side of a response whose last byte has been read, before
// that byte goes to the client: the connection is pooled (when the core's reuse rules allow) or
// closed, and the request recorded, so that a client which has the whole response also finds it
// in the metrics.
func (l *evLoop) responseTaken(c *loopConn) {
	u := c.u
	c.u = nil
	if core.Reusable(core.ResponseEnd{Framing: c.body.Framing, Complete: c.body.Done(), UpstreamClose: c.upClose,
		Leftover: len(u.in.Buffered()), MaybeMore: u.readable, PeerShut: u.hup, Err: c.respErr}) {
		l.putIdle(u)
	} else {
		l.closeUp(u)
	}
	c.t.relayed(c.code, nil)
	l.endRequest(c, c.code)
}

// take consumes the body bytes buffered from upstream that belong to the response and returns
// what goes to the client for them (the loop's one response-direction body function: the
// core's framing decides).
func (c *loopConn) take() []byte {
	u := c.u
	n, out, err := c.body.Next(u.in.Buffered())
	if err != nil {
		c.respErr = err
	}
	c.n += int64(n)
	u.in.Consume(n)
	return out
}

// streamBody copies the response body to the client, reading upstream only once the client has
// taken what came before.
func (l *evLoop) streamBody(c *loopConn) bool {
	if c.respErr != nil {
		l.abort(c, c.code)
		return false
	}
	if c.body.Done() {
		return l.stepped(c, outcome{})
	}
	u := c.u
	if !c.flush() || !u.readable {
		return false
	}
	n, err := readInto(u.fd, &u.in, len(u.in.Buf), &u.readable, u.hup)
	if err != nil {
		if errors.Is(err, io.EOF) {
			if last, ok := c.body.End(); ok {
				c.upClose = true
				l.responseTaken(c)
				c.send(last)
				return true
			}
		}
		c.t.relayed(c.code, err)
		l.abort(c, c.code)
		return false
	}
	if n == 0 {
		return false
	}
	body := c.take()
	if c.body.Done() && c.respErr == nil {
		l.responseTaken(c) // body still points into the connection's buffer, unused until send copies it
	}
	if len(body) > 0 {
		c.send(body)
	}
	return true
}

// answer tells the client of the failure that ended the exchange (answerFailure).
func (l *evLoop) answer(c *loopConn) bool {
	code, keep := c.answerFailure(c.failure, true)
	c.failure = nil
	l.endRequest(c, code)
	return l.endExchange(c, keep)
}

// endRequest ends the request (finish): the loop forgets its route (and with it the
// configuration it belongs to) between requests.
func (l *evLoop) endRequest(c *loopConn, code int) {
	c.finish(c.rq.rt, &c.rq, &c.t, code, c.n)
	c.reqBuf = c.reqBuf[:0]
	c.rq, c.failure = routed{}, nil
}

// endExchange readies the connection for its next request, or to close once its answer is out.
func (l *evLoop) endExchange(c *loopConn, keep bool) bool {
	if !keep || c.clientClose || l.s.shutting.Load() {
		c.phase = phDrain
		c.deadline = l.now.Add(time.Second)
		return true
	}
	c.phase = phHead
	c.started = false
	c.deadline = l.now.Add(l.s.state.Load().cfg.Timeouts.Idle)
	return true
}

// takeIdle takes the warmest idle connection to b that has not been idle too long. One that
// spoke or closed while idle was already dropped (dropSpokenIdle), and one whose flags show it
// readable or shut is not handed out (the core's reuse rule 2).
func (l *evLoop) takeIdle(b *balance.Backend) *loopUp {
	for {
		u, ok := l.idle.Get(b, l.now, loopIdleFor, l.closeUp)
		if !ok {
			return nil
		}
		if !u.readable && !u.hup {
			return u
		}
		l.closeUp(u)
	}
}

// loopIdleFor is the idle timeout of an upstream connection (its pool's timeouts.idle).
func loopIdleFor(u *loopUp) time.Duration { return u.idleFor }

// putIdle keeps an upstream connection for the next request to its backend (LIFO, so the
// warmest goes out first); past the pool's max_idle_per_backend it is closed.
func (l *evLoop) putIdle(u *loopUp) {
	u.owner = nil
	if !l.idle.Put(u.b, u, l.now, u.maxIdle) {
		l.closeUp(u)
	}
}

// dropIdle closes an idle connection and takes it out of the idle list.
func (l *evLoop) dropIdle(u *loopUp) {
	l.idle.Remove(u.b, func(x *loopUp) bool { return x == u })
	l.closeUp(u)
}

func (l *evLoop) closeUp(u *loopUp) {
	if u.fd < 0 {
		return
	}
	l.up[u.fd] = nil
	unix.Close(u.fd)
	u.fd = -1
	l.s.conns.Give() // taken by dial
}
