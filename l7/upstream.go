package l7

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/internal/connlimit"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/proxyproto"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
)

// upConn is a pooled upstream HTTP/1.1 connection of the goroutine engine, with its own read
// buffer.
type upConn struct {
	h1.Reader
	key    upKey // where it idles: its backend (and its client, for PROXY pools)
	reused bool
	rc     syscall.RawConn // for probe, made once (SyscallConn allocates)
	peek   func(fd uintptr) bool
	res    core.IdleProbe
}

// upstreams holds the goroutine engine's idle connections of one pool, per backend, under the
// core's reuse rules (core/reuse.go). Idle sockets are not watched here (no goroutine per idle
// connection), so get probes each before handing it out: one that became readable (bytes
// nobody asked for) or was shut by the backend is discarded.
type upstreams struct {
	mu      sync.Mutex
	idle    *core.Idle[upKey, *upConn]
	maxIdle int
	idleFor time.Duration
	dialer  connlimit.DialFunc // counts each connection against the server's descriptor budget
	// sendProxy is the PROXY protocol version each connection starts with (0: none); such a
	// connection carries one client connection's requests only (its key names that client).
	sendProxy int
	// tls is the client TLS configuration of a pool with tls: (HTTP/1.1 over TLS); nil: cleartext.
	tls       *tls.Config
	handshake time.Duration // bounds a TLS handshake (the connect timeout)
	closed    bool
}

// upKey is where an idle upstream connection may be reused: its backend and, for a pool that
// sends PROXY headers, the client connection (addresses) its header named.
type upKey struct {
	b      *balance.Backend
	client string
}

// clientEnds are the addresses of a client connection, for a PROXY header.
type clientEnds struct{ src, dst net.Addr }

func newUpstreams(pc Pool, budget *connlimit.Budget, tc *tls.Config) *upstreams {
	d := &net.Dialer{Timeout: pc.Timeouts.Connect, KeepAlive: 30 * time.Second}
	return &upstreams{idle: core.NewIdle[upKey, *upConn](), maxIdle: pc.MaxIdlePerBackend,
		idleFor: pc.Timeouts.Idle, dialer: budget.Dial(d.DialContext), sendProxy: proxyVersion(pc.SendProxyProtocol),
		tls: tc, handshake: pc.Timeouts.Connect}
}

// proxyVersion reads send_proxy_protocol (validated): 0 for none.
func proxyVersion(v string) int {
	switch v {
	case "v1":
		return 1
	case "v2":
		return 2
	}
	return 0
}

func closeUpConn(uc *upConn) { uc.Conn.Close() }

func (u *upstreams) idleForOf(*upConn) time.Duration { return u.idleFor }

// get returns an idle connection to b that is quiet and has not been idle too long, or dials a
// new one (always when fresh: a replay after a stale one).
func (u *upstreams) get(b *balance.Backend, now time.Time, client clientEnds, fresh bool) (*upConn, error) {
	key := upKey{b: b}
	if u.sendProxy != 0 {
		key.client = client.src.String() + " " + client.dst.String()
	}
	for !fresh {
		u.mu.Lock()
		uc, ok := u.idle.Get(key, now, u.idleForOf, closeUpConn)
		u.mu.Unlock()
		if !ok {
			return u.dial(key, client)
		}
		if uc.probe() == core.IdleQuiet {
			uc.reused = true
			return uc, nil
		}
		uc.Conn.Close()
	}
	return u.dial(key, client)
}

// dial opens a connection to key's backend, its PROXY header first when the pool sends one.
func (u *upstreams) dial(key upKey, client clientEnds) (*upConn, error) {
	c, err := u.dialer(context.Background(), "tcp", key.b.Address)
	if err != nil {
		return nil, err
	}
	if u.sendProxy != 0 {
		if _, err := c.Write(proxyproto.Header(u.sendProxy, client.src, client.dst)); err != nil {
			c.Close()
			return nil, fmt.Errorf("send proxy protocol header to %s: %w", key.b.Address, err)
		}
	}
	if u.tls != nil {
		if c, err = u.handshakeWith(c, key.b.Address); err != nil {
			return nil, err
		}
	}
	return &upConn{Reader: h1.Reader{Conn: c, Buf: make([]byte, 16<<10)}, key: key}, nil
}

// put returns a connection whose last response was read completely (core.Reusable); past
// maxIdle it is closed.
func (u *upstreams) put(uc *upConn, now time.Time) {
	u.mu.Lock()
	if !u.closed && u.idle.Put(uc.key, uc, now, u.maxIdle) {
		u.mu.Unlock()
		return
	}
	u.mu.Unlock()
	uc.Conn.Close()
}

// closeIdle closes every idle connection; with final set, later puts close theirs too.
func (u *upstreams) closeIdle(final bool) {
	u.mu.Lock()
	var list []*upConn
	u.idle.Drain(func(uc *upConn) { list = append(list, uc) })
	u.closed = u.closed || final
	u.mu.Unlock()
	for _, uc := range list {
		uc.Conn.Close()
	}
}

// probe looks at an idle connection without reading it: a peek that does not wait. The
// RawConn and the callback are made once per connection (each would allocate per call).
func (uc *upConn) probe() core.IdleProbe {
	if uc.rc == nil {
		sc, ok := uc.Conn.(syscall.Conn)
		if !ok {
			return core.IdleQuiet
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return core.IdleShut
		}
		uc.rc = rc
		uc.peek = func(fd uintptr) bool {
			uc.res = peekFD(int(fd))
			return true // never wait
		}
	}
	uc.res = core.IdleQuiet
	if err := uc.rc.Read(uc.peek); err != nil {
		return core.IdleShut
	}
	return uc.res
}

// handshakeWith runs the TLS handshake of a pool with tls: on c (after any PROXY header, which
// precedes TLS), verifying the backend as server_name, else as its address's host, says.
func (u *upstreams) handshakeWith(c net.Conn, addr string) (net.Conn, error) {
	cfg := u.tls.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(c, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), u.handshake)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w (check the pool's tls: ca_file, server_name, cert)", addr, err)
	}
	return tc, nil
}
