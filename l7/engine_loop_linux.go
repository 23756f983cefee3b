//go:build linux

package l7

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
)

// The event loop serves plain-HTTP/1.1 keep-alive traffic the way nginx and HAProxy do: one
// epoll instance per CPU (GOMAXPROCS), each turned by one goroutine, owning non-blocking
// descriptors and running every connection as a state machine. The goroutine engine
// (engine_goroutine.go) spent a fifth of its CPU parking and waking goroutines and in sysmon, and
// issued a read that returned EAGAIN before nearly every real one; the loop reads a socket only
// when epoll said it is readable (or the last read filled the buffer), so a proxied request
// costs four system calls: read the request, write it upstream, read the response, write it
// back, plus a share of one epoll_wait.
//
// The loop is a thin I/O layer over the request core (request.go and package core): the core
// parses, routes, admits, rewrites heads, frames bodies, decides retries and which upstream
// connections may be reused; the loop only moves bytes between non-blocking sockets. It serves
// a request whose head and whole body are buffered, sent to a backend given as an IP address.
// Anything else is handed over, at the request boundary and with the bytes read so far, to a
// goroutine: streamed uploads, host-name backends and h2c/h2 pools to the goroutine engine
// (engine_goroutine.go), an h2c preface to the HTTP/2 engine, and everything else the core does
// not serve (upgrades, ...) to net/http.
// Responses of any size and framing stream through the loop, with backpressure: it reads the
// backend only once the client took what came before.

// loopKind says what an epoll registration is; it travels in the event's Pad field.
const (
	kindClient int32 = iota + 1
	kindUpstream
	kindListener
	kindWake
)

// sweepEvery is how often a loop checks deadlines and idle upstream connections: timeouts fire
// up to this much late.
const sweepEvery = 100 * time.Millisecond

// evLoop is one event loop.
type evLoop struct {
	s      *Server
	epfd   int
	epf    *os.File        // epfd on Go's poller, where an idle loop parks
	eprc   syscall.RawConn // of epf
	waitDL time.Time       // epf's read deadline
	wakefd int
	events []unix.EpollEvent
	cl     []*loopConn // by descriptor
	up     []*loopUp   // by descriptor
	conns  []*loopConn // every client connection (deadline sweep, shutdown)
	idle   *core.Idle[*balance.Backend, *loopUp]
	addrs  map[*balance.Backend]unix.Sockaddr
	// usable is dialable as a value made once (tries.usable), not per request
	usable func(*balance.Backend) bool
	lns    []*loopListener
	now    time.Time
	sweep  time.Time
	count  atomic.Int64 // client connections the loop owns

	mu      sync.Mutex
	cmds    []func()
	stopped bool // shutdown has taken the last commands: post refuses more
	done    chan struct{}
}

// loopListener is a loop's duplicate of a listening socket.
type loopListener struct {
	fd       int
	scheme   string
	fb       *h1.Handover
	paused   bool // out of descriptors: off epoll until the next sweep
	pausedAt time.Time
}

// phase is where a client connection is in its request.
type phase int

const (
	phHead     phase = iota // reading a request head
	phExchange              // the request's exchange, at step loopConn.x
	phDrain                 // writing what is left, then closing
)

// loopConn is a client connection on an event loop.
type loopConn struct {
	*clientConn
	l        *evLoop
	fd       int
	idx      int // in l.conns
	ln       *loopListener
	readable bool
	writable bool
	hup      bool // the peer shut its side: read until EOF, whatever the byte count
	gone     bool // a write to the client failed
	phase    phase
	pend     []byte // response bytes the client has not taken yet
	deadline time.Time
	started  bool // a byte of the next request head has arrived

	// TLS connections (engine_loop_tls_linux.go): crypto/tls over a wire the loop feeds.
	tls  *tls.Conn
	wire *tlsWire

	// the request in progress
	rq      routed
	t       tries // its attempts (tries.go); none between requests
	x       xstep // its exchange's step (exchange.go)
	failure error // why the exchange failed, for its answer (xAnswer)
	u       *loopUp
	total   time.Time // the request's total deadline
	sent    int
	code    int
	n       int64
	upClose bool
	respErr error
}

// loopUp is an upstream HTTP/1.1 connection of a loop: in use by owner, or idle in l.idle.
type loopUp struct {
	fd       int
	b        *balance.Backend
	idleFor  time.Duration
	maxIdle  int
	in       h1.Reader
	owner    *loopConn
	readable bool
	writable bool
	hup      bool
	reused   bool
	gotBytes bool // a response byte arrived on this attempt
}

// startLoops starts one event loop per CPU the runtime may use; it reports whether they run.
func (s *Server) startLoops() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loopsStopped {
		return false
	}
	s.loopOnce.Do(func() {
		n := s.state.Load().cfg.EventLoops
		switch {
		case n < 0:
			return
		case n == 0:
			n = runtime.GOMAXPROCS(0)
		}
		for range n {
			l, err := newLoop(s)
			if err != nil {
				s.log.Warn("l7 event loop unavailable; serving a goroutine per connection", "error", err)
				for _, l := range s.loops {
					l.stop()
				}
				s.loops = nil
				return
			}
			s.loops = append(s.loops, l)
			go l.run()
		}
		for i, l := range s.loops {
			s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name:        "switchyard_l7_loop_connections",
				Help:        "Client connections an event loop serves.",
				ConstLabels: prometheus.Labels{"loop": strconv.Itoa(i)},
			}, func() float64 { return float64(l.count.Load()) }))
		}
	})
	return len(s.loops) > 0
}

func newLoop(s *Server) (*evLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("create epoll: %w", err)
	}
	wfd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("create eventfd: %w", err)
	}
	l := &evLoop{s: s, epfd: epfd, wakefd: wfd, events: make([]unix.EpollEvent, 256),
		idle: core.NewIdle[*balance.Backend, *loopUp](), addrs: map[*balance.Backend]unix.Sockaddr{},
		done: make(chan struct{}), now: time.Now()}
	l.usable = l.dialable
	// An epoll descriptor is itself pollable: readable when events are ready. On Go's poller, an
	// idle loop parks like any goroutine, so its P goes idle instead of sitting in a blocking
	// system call, which sysmon would take from it every 20 us (and stay awake doing so).
	err = unix.SetNonblock(epfd, true)
	if err == nil {
		l.epf = os.NewFile(uintptr(epfd), "l7-epoll")
		l.eprc, err = l.epf.SyscallConn()
	}
	if err == nil {
		err = l.ctl(unix.EPOLL_CTL_ADD, wfd, unix.EPOLLIN, kindWake)
	}
	if err != nil {
		unix.Close(wfd)
		if l.epf != nil {
			l.epf.Close()
		} else {
			unix.Close(epfd)
		}
		return nil, fmt.Errorf("set up event loop: %w", err)
	}
	return l, nil
}

// wait returns the next batch of events (n == 0 when the sweep is due). Under load the next
// event is rarely more than a moment away, so the loop first waits for it in the kernel for up
// to a millisecond, holding its P like a goroutine that computes: the thread is woken straight
// by the kernel, as nginx's workers are. Only a loop that stays idle parks on Go's poller, where
// its P goes idle. A blocking epoll_wait made as a system call instead would let sysmon take the
// P from every waiting loop and keep sysmon polling every 20 us (a seventh of the CPU here);
// parking on the poller at once costs a scheduler round trip per wake-up, and the tail latency
// that goes with it.
func (l *evLoop) wait() (int, error) {
	n, err := epollWait(l.epfd, l.events, 1)
	if n > 0 || (err != nil && err != unix.EINTR) {
		return n, err
	}
	if now := time.Now(); l.waitDL.Sub(now) < sweepEvery/2 {
		l.waitDL = now.Add(sweepEvery)
		_ = l.epf.SetReadDeadline(l.waitDL)
	}
	rerr := l.eprc.Read(func(fd uintptr) bool {
		n, err = epollWait(int(fd), l.events, 0)
		return n > 0 || (err != nil && err != unix.EINTR)
	})
	if errors.Is(rerr, os.ErrDeadlineExceeded) {
		return 0, nil
	}
	if rerr != nil {
		return 0, rerr
	}
	return n, err
}

// epollWait is epoll_wait without the runtime's system-call bookkeeping (see wait): it blocks
// at most ms milliseconds, and a signal (such as the runtime's preemption) cuts it short.
func epollWait(epfd int, events []unix.EpollEvent, ms int) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), uintptr(ms), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func (l *evLoop) ctl(op, fd int, events uint32, kind int32) error {
	ev := unix.EpollEvent{Events: events, Fd: int32(fd), Pad: kind}
	if err := unix.EpollCtl(l.epfd, op, fd, &ev); err != nil {
		return fmt.Errorf("epoll_ctl fd %d: %w", fd, err)
	}
	return nil
}

// do runs fn on the loop and waits for it (or for the loop to have ended).
func (l *evLoop) do(fn func()) {
	ran := make(chan struct{})
	l.post(func() { fn(); close(ran) }) // a stopped loop has closed l.done
	select {
	case <-ran:
	case <-l.done:
	}
}

// stop ends the loop, closing everything it still owns.
func (l *evLoop) stop() {
	l.do(func() { l.cmds = append(l.cmds, nil) })
	<-l.done
}

// serveLoop puts a TCP listener on every loop and returns when the server shuts down.
func (s *Server) serveLoop(ln *net.TCPListener, scheme string, fb *h1.Handover) error {
	rc, err := ln.SyscallConn()
	if err != nil {
		return fmt.Errorf("serve %s on event loops: %w", ln.Addr(), err)
	}
	var fds []int
	var derr error
	cerr := rc.Control(func(fd uintptr) {
		for range s.loops {
			nfd, err := unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				derr = err
				return
			}
			fds = append(fds, nfd)
		}
	})
	if err := errors.Join(cerr, derr); err != nil {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return fmt.Errorf("serve %s on event loops: duplicate listener: %w", ln.Addr(), err)
	}
	for i, l := range s.loops {
		ll := &loopListener{fd: fds[i], scheme: scheme, fb: fb}
		l.do(func() {
			if s.shutting.Load() {
				unix.Close(ll.fd)
				return
			}
			// Every loop waits on the socket; EPOLLEXCLUSIVE wakes one of them per connection.
			if err := l.ctl(unix.EPOLL_CTL_ADD, ll.fd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE, kindListener); err != nil {
				s.log.Warn("l7 event loop: listener", "error", err)
				unix.Close(ll.fd)
				return
			}
			l.lns = append(l.lns, ll)
		})
	}
	<-s.loopsDone
	return nil
}

// closeLoops stops the loops' listeners and closes their connections: all of them, or those
// between requests. It returns how many client connections the loops still own.
func (s *Server) closeLoops(all bool) int {
	n := 0
	s.mu.Lock()
	loops := s.loops // TLS connections can start the loops at any time (tlsToLoop)
	s.mu.Unlock()
	for _, l := range loops {
		l.do(func() {
			for _, ll := range l.lns {
				l.closeListener(ll)
			}
			l.lns = nil
			for i := len(l.conns) - 1; i >= 0; i-- {
				if c := l.conns[i]; all || (c.phase == phHead && !c.started && !c.readable && len(c.pend) == 0 && len(c.in.Buffered()) == 0 && c.mayCloseIdle(time.Now())) {
					l.abort(c, 499)
				}
			}
			l.idle.Drain(l.closeUp)
		})
		n += int(l.count.Load())
	}
	return n
}

// dropIdleLoops has every loop close its idle upstream connections when it next turns (posted,
// not waited for: it may be called on a loop).
func (s *Server) dropIdleLoops() {
	s.mu.Lock()
	loops := s.loops
	s.mu.Unlock()
	for _, l := range loops {
		l.post(func() { l.idle.Drain(l.closeUp) })
	}
}

// stopLoops ends the loops once nothing is left to serve.
func (s *Server) stopLoops() {
	s.mu.Lock()
	if s.loopsStopped {
		s.mu.Unlock()
		return
	}
	s.loopsStopped = true
	close(s.loopsDone)
	loops := s.loops
	s.mu.Unlock()
	// Not under s.mu: a loop handing a connection over takes it.
	for _, l := range loops {
		l.stop()
	}
}

func (l *evLoop) run() {
	defer close(l.done)
	for {
		n, err := l.wait()
		if err != nil && !errors.Is(err, unix.EINTR) {
			l.s.log.Error("l7 event loop: epoll_wait", "error", err)
			l.shutdown()
			return
		}
		l.now = time.Now()
		l.dropSpokenIdle(n)
		for i := range max(n, 0) {
			ev := &l.events[i]
			fd := int(ev.Fd)
			switch ev.Pad {
			case kindClient:
				if c := l.client(fd); c != nil {
					setReady(ev.Events, &c.readable, &c.writable, &c.hup)
					l.step(c)
				}
			case kindUpstream:
				if fd < len(l.up) && l.up[fd] != nil {
					u := l.up[fd]
					setReady(ev.Events, &u.readable, &u.writable, &u.hup)
					if u.owner != nil {
						l.step(u.owner)
					}
				}
			case kindListener:
				l.accept(fd)
			case kindWake:
				if l.runCmds() {
					l.shutdown()
					return
				}
			}
		}
		if l.now.Sub(l.sweep) >= sweepEvery {
			l.sweep = l.now
			l.expire()
		}
	}
}

// dropSpokenIdle discards the idle upstream connections that became readable or were shut in
// this batch of events (the core's reuse rule 2), before any client event of the batch could
// take one of them: bytes on an idle upstream are nobody's response.
func (l *evLoop) dropSpokenIdle(n int) {
	for i := range max(n, 0) {
		ev := &l.events[i]
		if ev.Pad != kindUpstream || ev.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) == 0 {
			continue
		}
		if fd := int(ev.Fd); fd < len(l.up) && l.up[fd] != nil && l.up[fd].owner == nil {
			l.dropIdle(l.up[fd])
		}
	}
}

func setReady(ev uint32, readable, writable, hup *bool) {
	if ev&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		*readable = true
	}
	if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		*hup = true
	}
	if ev&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		*writable = true
	}
}

// runCmds runs the work other goroutines queued; it reports a stop request.
func (l *evLoop) runCmds() (stop bool) {
	var buf [8]byte
	_, _ = unix.Read(l.wakefd, buf[:])
	for {
		l.mu.Lock()
		cmds := l.cmds
		l.cmds = nil
		l.mu.Unlock()
		if len(cmds) == 0 {
			return stop
		}
		for _, fn := range cmds {
			if fn == nil {
				stop = true
				continue
			}
			fn()
		}
	}
}

// shutdown closes every descriptor the loop owns.
func (l *evLoop) shutdown() {
	// Connections dealt to this loop meanwhile are closed by adopt (the server is shutting down);
	// after this no command is taken (post reports false, and its caller cleans up).
	l.runCmds()
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
	l.runCmds()
	for _, ll := range l.lns {
		l.closeListener(ll)
	}
	l.lns = nil
	for len(l.conns) > 0 {
		l.abort(l.conns[len(l.conns)-1], 499)
	}
	l.idle.Drain(l.closeUp)
	unix.Close(l.wakefd)
	l.epf.Close()
}

// closeListener takes a listener off epoll and closes the loop's descriptor. Closing alone is
// not enough: epoll forgets a socket only when its last descriptor closes, and after an upgrade
// the new process holds one, so the old loop would go on waking for its connections.
func (l *evLoop) closeListener(ll *loopListener) {
	if !ll.paused {
		_ = l.ctl(unix.EPOLL_CTL_DEL, ll.fd, 0, kindListener)
	}
	unix.Close(ll.fd)
}

func (l *evLoop) client(fd int) *loopConn {
	if fd < len(l.cl) {
		return l.cl[fd]
	}
	return nil
}

// accept takes the pending connections of a listener.
func (l *evLoop) accept(fd int) {
	var ll *loopListener
	for _, x := range l.lns {
		if x.fd == fd {
			ll = x
		}
	}
	if ll == nil {
		return
	}
	for range 64 {
		nfd, sa, err := unix.Accept4(fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.EINTR) {
				return
			}
			// Out of descriptors and the like: the listener is level-triggered, so leave it
			// off epoll until the next sweep instead of spinning (net/http backs off too).
			l.s.log.Warn("l7 accept", "error", err, "retry_in", sweepEvery)
			if l.ctl(unix.EPOLL_CTL_DEL, fd, 0, kindListener) == nil {
				ll.paused, ll.pausedAt = true, l.now
			}
			return
		}
		if l.s.hard.Load() {
			unix.Close(nfd)
			continue
		}
		if !l.s.conns.Admit() {
			_, _ = rawWrite(nfd, l.s.conns.Answer()) // over max_connections or the budget: 503 and close
			unix.Close(nfd)
			continue
		}
		_ = unix.SetsockoptInt(nfd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
		// EPOLLEXCLUSIVE wakes one loop, which may take a whole burst of connections: deal them
		// out round robin so that every loop (every CPU) gets its share.
		to := l.s.loops[int(l.s.loopNext.Add(1))%len(l.s.loops)]
		if to == l {
			l.adopt(nfd, sa, ll)
		} else {
			// Counted while between loops, so that Shutdown does not end with it on its way.
			l.s.pending.Add(1)
			if !to.post(func() { l.s.pending.Add(-1); to.adopt(nfd, sa, ll) }) {
				l.s.pending.Add(-1)
				unix.Close(nfd)
				l.s.conns.Done()
			}
		}
	}
}

// post queues fn for the loop without waiting; false means the loop has stopped and fn will
// never run.
func (l *evLoop) post(fn func()) bool {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return false
	}
	l.cmds = append(l.cmds, fn)
	l.mu.Unlock()
	var one [8]byte
	one[0] = 1
	_, _ = unix.Write(l.wakefd, one[:])
	return true
}

// adopt starts serving an accepted connection on this loop.
func (l *evLoop) adopt(nfd int, sa unix.Sockaddr, ll *loopListener) {
	if l.s.hard.Load() {
		unix.Close(nfd)
		l.s.conns.Done()
		return
	}
	c := &loopConn{l: l, fd: nfd, ln: ll, readable: true, writable: true}
	c.clientConn = newClientConn(l.s, c, sockaddrToTCP(sa), ll.scheme, ll.fb)
	c.in = h1.Reader{Buf: make([]byte, 4<<10)}
	l.register(c)
}

// register puts a new client connection on the loop's epoll and serves what it has.
func (l *evLoop) register(c *loopConn) {
	nfd := c.fd
	if err := l.ctl(unix.EPOLL_CTL_ADD, nfd, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP|unix.EPOLLET, kindClient); err != nil {
		unix.Close(nfd)
		l.s.conns.Done()
		return
	}
	for nfd >= len(l.cl) {
		l.cl = append(l.cl, make([]*loopConn, len(l.cl)+64)...)
	}
	l.cl[nfd] = c
	c.idx = len(l.conns)
	l.conns = append(l.conns, c)
	l.count.Add(1)
	c.deadline = l.now.Add(l.s.state.Load().cfg.Timeouts.Idle)
	l.step(c)
}

func sockaddrToTCP(sa unix.Sockaddr) *net.TCPAddr {
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return &net.TCPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *unix.SockaddrInet6:
		ip := make(net.IP, 16)
		copy(ip, a.Addr[:])
		return &net.TCPAddr{IP: ip, Port: a.Port}
	}
	return &net.TCPAddr{}
}

// forget takes a client connection off the loop (not closing its descriptor). The vacated slot
// at the end of l.conns is cleared: a slice keeps what is beyond its length reachable, and a
// flood of connections once closed would otherwise stay in memory for good.
func (l *evLoop) forget(c *loopConn) {
	_ = l.ctl(unix.EPOLL_CTL_DEL, c.fd, 0, kindClient)
	l.cl[c.fd] = nil
	end := len(l.conns) - 1
	last := l.conns[end]
	l.conns[c.idx], last.idx = last, c.idx
	l.conns[end] = nil
	l.conns = l.conns[:end]
	l.count.Add(-1)
	if cap(l.conns) > 1024 && len(l.conns) < cap(l.conns)/4 {
		l.conns = append([]*loopConn(nil), l.conns...) // give a flood's backing array back
	}
}

// abort ends a connection at once: the request in progress (if any) ends with code.
func (l *evLoop) abort(c *loopConn, code int) {
	if c.t.attempts() > 0 {
		l.abandon(c)
		if c.phase == phExchange && c.x == xRelay {
			code = c.code // the status already went out
		}
		l.endRequest(c, code)
	}
	l.forget(c)
	if c.tls != nil && code == 0 {
		c.closeNotify()
	}
	unix.Close(c.fd)
	l.s.conns.Done()
}

// step runs a connection's state machine as far as its sockets allow.
func (l *evLoop) step(c *loopConn) {
	for {
		if c.gone {
			l.abort(c, 499)
			return
		}
		var more bool
		switch c.phase {
		case phHead:
			more = l.readHead(c)
		case phExchange:
			more = l.exchange(c)
		case phDrain:
			if c.flush() && !c.gone {
				l.abort(c, 0)
				return
			}
		}
		if !more {
			return
		}
	}
}

// Write queues a proxy-made answer (the core's error responses and refusals).
func (c *loopConn) Write(b []byte) (int, error) {
	c.send(b)
	return len(b), nil
}

// send writes b to the client, straight away when nothing is queued; the rest waits in pend.
func (c *loopConn) send(b []byte) {
	if c.gone {
		return
	}
	if c.tls != nil {
		c.sendTLS(b)
		return
	}
	if len(c.pend) == 0 && c.writable {
		n, err := rawWrite(c.fd, b)
		switch {
		case err == unix.EAGAIN:
			c.writable = false
		case err != nil:
			c.gone = true
			return
		default:
			b = b[n:]
			if len(b) > 0 {
				c.writable = false // a short write: the socket buffer is full
			}
		}
	}
	c.pend = append(c.pend, b...)
}

// flush writes queued bytes; it reports whether none are left.
func (c *loopConn) flush() bool {
	for len(c.pend) > 0 && c.writable && !c.gone {
		n, err := rawWrite(c.fd, c.pend)
		switch {
		case err == unix.EAGAIN:
			c.writable = false
		case err != nil:
			c.gone = true
		default:
			c.pend = c.pend[:copy(c.pend, c.pend[n:])]
		}
	}
	if len(c.pend) == 0 && cap(c.pend) > 64<<10 {
		c.pend = nil // a large response backed up once: do not keep its buffer for good
	}
	return len(c.pend) == 0
}

// read reads the client's bytes into c.in (see readInto), decrypting them on a TLS connection.
func (c *loopConn) read(limit int) (int, error) {
	if c.tls != nil {
		return c.readTLS(limit)
	}
	return readInto(c.fd, &c.in, limit, &c.readable, c.hup)
}

// readInto reads once into cr; it clears *ready when the socket has nothing more. n == 0 with
// a nil error means: wait for epoll. hup says the peer has closed its side, so the end of the
// stream is still to be read however few bytes came.
func readInto(fd int, cr *h1.Reader, limit int, ready *bool, hup bool) (int, error) {
	if err := cr.MakeRoom(limit); err != nil {
		return 0, err
	}
	space := len(cr.Buf) - cr.W
	n, err := rawRead(fd, cr.Buf[cr.W:])
	switch {
	case err == unix.EAGAIN:
		*ready = false
		return 0, nil
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	// A read that did not fill the buffer emptied the socket: the next byte brings an edge. Not
	// so the end of the stream, which came with an edge already taken.
	if n < space && !hup {
		*ready = false
	}
	cr.W += n
	return n, nil
}

// expire enforces deadlines, retires idle upstream connections and resumes paused listeners.
func (l *evLoop) expire() {
	for i := len(l.conns) - 1; i >= 0; i-- {
		if i >= len(l.conns) {
			continue
		}
		c := l.conns[i]
		if c.deadline.IsZero() || l.now.Before(c.deadline) {
			continue
		}
		if c.phase == phExchange && c.x < xRelay {
			// Connecting, sending or awaiting the head: a failure of the attempt, which the
			// exchange may retry.
			l.stepped(c, outcome{err: os.ErrDeadlineExceeded})
			l.step(c)
			continue
		}
		l.abort(c, 504)
	}
	l.idle.Expire(l.now, loopIdleFor, l.closeUp)
	for _, ll := range l.lns {
		if ll.paused && l.now.Sub(ll.pausedAt) >= sweepEvery {
			if l.ctl(unix.EPOLL_CTL_ADD, ll.fd, unix.EPOLLIN|unix.EPOLLEXCLUSIVE, kindListener) == nil {
				ll.paused = false
			}
		}
	}
}

// rawRead and rawWrite are read(2) and write(2) on non-blocking sockets without the runtime's
// blocking-syscall bookkeeping: they never block, and a loop holds on to its P anyway.
func rawRead(fd int, p []byte) (int, error)  { return rawIO(unix.SYS_READ, fd, p) }
func rawWrite(fd int, p []byte) (int, error) { return rawIO(unix.SYS_WRITE, fd, p) }

func rawIO(trap uintptr, fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
