package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/switchyard/switchyard/edge/fastpath"
	"github.com/switchyard/switchyard/internal/connlimit"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/h2"
	"github.com/switchyard/switchyard/internal/h3"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// The front door: besides its plain listener (HTTP/1.1 with the fast path, and h2c with prior
// knowledge), the edge serves clients over TLS (tls:) on an address of its own, HTTP/2 or
// HTTP/1.1 by ALPN, and HTTP/3 over QUIC on the same port (tls.http3), advertised to TLS clients
// with Alt-Svc. Every protocol reaches the same Edge.ServeHTTP, so every cache rule, collapse
// and purge holds on all of them alike; HTTP/2 is internal/h2's, the one L7 runs. Fresh memory
// hits of HTTP/1.1 and HTTP/2 are answered by the fast path (edge/fastpath) by the same rules.

// TLSConfig is the edge's TLS listener.
type TLSConfig struct {
	// Listen is the TLS address, e.g. "0.0.0.0:443" (":0" picks a port).
	Listen string `yaml:"listen"`
	// Config holds the certificates, chosen by SNI.
	tlsconf.Config `yaml:",inline"`
	// HTTP3 serves HTTP/3 on the same port over UDP and advertises it with Alt-Svc.
	HTTP3 bool `yaml:"http3"`
}

// validate checks the TLS listener's fields, naming the fix.
func (c *TLSConfig) validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return &fieldError{"tls.listen", fmt.Sprintf("%q is not host:port; write it like 0.0.0.0:8443", c.Listen)}
	}
	if path, problem, ok := c.Config.Validate("tls"); !ok {
		return &fieldError{path, problem}
	}
	return nil
}

// frontDoor is what startTLS started.
type frontDoor struct {
	srv   *http.Server
	addr  net.Addr
	ln    net.Listener     // the TLS port's TCP listener
	h1    *h1.Handover     // HTTP/1.1 connections, handshaken, for srv (the fast path off)
	fast  *fastpath.Server // HTTP/1.1 connections, handshaken, on the fast path; srv serves its Fallback
	h3    *h3.Server
	certs *tlsconf.Certs // with tls.acme: obtained and renewed until close
}

// h2Conns are the HTTP/2 connections the edge serves (TLS and h2c), for a graceful shutdown.
type h2Conns struct {
	mu     sync.Mutex
	conns  map[*h2.Conn]struct{}
	closed bool
}

// track adds or removes a served HTTP/2 connection; false once the edge is closing.
func (s *h2Conns) track(c *h2.Conn, on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !on {
		delete(s.conns, c)
		return true
	}
	if s.closed {
		return false
	}
	if s.conns == nil {
		s.conns = map[*h2.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return true
}

// shutdown sends every connection GOAWAY (the streams taken finish, the connection closes
// after them) and refuses new ones.
func (s *h2Conns) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Shutdown()
	}
}

// startTLS opens the TLS listener (and the HTTP/3 sockets on its port), counted against the
// same connection cap as the plain listener.
func (e *Edge) startTLS() error {
	c := e.cfg.TLS
	var metrics *tlsconf.Metrics
	if c.ACME != nil {
		metrics = tlsconf.NewMetrics(e.registry)
	}
	certs, err := tlsconf.Open(&c.Config, tlsconf.Options{Log: e.log, Metrics: metrics}, "h2", "http/1.1")
	if err != nil {
		return fmt.Errorf("start edge: tls: %w", err)
	}
	tc := certs.TLS
	if err := e.askTierCerts(tc); err != nil { // tiers.client_ca_file: edge/tiermtls.go
		certs.Close()
		return fmt.Errorf("start edge: tls: %w", err)
	}
	raw, err := e.sockets.Listen("tcp", c.Listen)
	if err != nil {
		certs.Close()
		return fmt.Errorf("start edge: listen on %s: %w", c.Listen, err)
	}
	fd := &frontDoor{addr: raw.Addr(), h1: h1.NewHandover(raw.Addr())}
	var h http.Handler = e
	if c.HTTP3 {
		if fd.h3, err = e.startHTTP3(tc, raw.Addr().(*net.TCPAddr)); err != nil {
			raw.Close()
			certs.Close()
			return err
		}
		h = fd.h3.Advertise(e)
	}
	fd.srv = &http.Server{Handler: withTLSState(h), ConnContext: connTLSState, ReadHeaderTimeout: clientReadHeader, IdleTimeout: clientIdle,
		WriteTimeout: time.Duration(e.cfg.ClientTimeout), ConnState: guardState,
		ErrorLog: slog.NewLogLogger(e.log.Handler(), slog.LevelDebug)}
	fd.ln = clientListener(raw, e.conns)
	if e.cfg.DisableFastPath {
		go fd.srv.Serve(&h1.GuardListener{Listener: fd.h1, MaxHeaderBytes: clientMaxHead})
	} else {
		// Hits over TLS are answered as on the plain listener, without net/http: the fast
		// path hands it the rest (screened by internal/h1's guard), as it does there.
		alt := ""
		if fd.h3 != nil {
			alt = fd.h3.AltSvc()
		}
		fd.fast = e.newTLSFastPath(fd.ln, h, alt)
		go fd.srv.Serve(fd.fast.Fallback())
	}
	go e.acceptTLS(fd, tc, h)
	e.front = fd
	e.log.Info("edge tls listening", "listen", fd.addr.String(), "http3", c.HTTP3)
	if c.ACME != nil {
		fd.certs = certs
		e.acme.Store(certs)
		// Challenges are answered from here on: HTTP-01 on the plain listener (started
		// before), TLS-ALPN-01 on this one.
		if err := certs.Manage(e.addrs[0].String(), fd.addr.String()); err != nil {
			return fmt.Errorf("start edge: tls: %w", err)
		}
	}
	return nil
}

// startHTTP3 binds (or inherits) the UDP sockets on the TLS listener's port and serves HTTP/3.
func (e *Edge) startHTTP3(tc *tls.Config, tcp *net.TCPAddr) (*h3.Server, error) {
	udp, err := h3.ListenUDP(e.sockets, e.cfg.TLS.Listen, tcp, e.log)
	if err != nil {
		return nil, fmt.Errorf("start edge: %w", err)
	}
	return h3.Serve(udp, tc, e, h3.Options{MaxHeaderBytes: clientMaxHead, IdleTimeout: clientIdle, Log: e.log})
}

// acceptTLS takes the TLS port's connections: each is handshaken on a goroutine of its own
// (within the read-header timeout, so a slow handshake is cut like a slow head), then served by
// the HTTP/2 front end (internal/h2, the one L7 runs) when ALPN chose h2, else as HTTP/1.1 by
// the fast path (or, with it off, by net/http, its heads screened by internal/h1's guard).
func (e *Edge) acceptTLS(fd *frontDoor, tc *tls.Config, h http.Handler) {
	defer fd.h1.Close()
	e.acceptLoop(fd.ln, "edge tls accept", func(raw net.Conn) { e.serveTLS(fd, tls.Server(raw, tc), h) })
}

// acceptLoop serves each connection ln accepts on a goroutine of its own until ln closes; an
// accept error (out of descriptors and the like) is logged, rate-limited, and backed off from.
func (e *Edge) acceptLoop(ln net.Listener, what string, serve func(net.Conn)) {
	var backoff connlimit.AcceptBackoff
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			delay := backoff.Failed()
			e.warn(what, "error", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		backoff.Accepted()
		go serve(c)
	}
}

// serveTLS handshakes one connection and serves it by the protocol ALPN chose.
func (e *Edge) serveTLS(fd *frontDoor, c *tls.Conn, h http.Handler) {
	if err := e.handshakes.Run(c, clientReadHeader); err != nil {
		c.Close()
		return
	}
	st := c.ConnectionState()
	if st.NegotiatedProtocol == tlsconf.ACMETLS1 {
		c.Close() // a TLS-ALPN-01 validation: the CA wanted the certificate and sends no request
		return
	}
	if st.NegotiatedProtocol != "h2" {
		if fd.fast != nil {
			fd.fast.ServeConn(c)
		} else if !fd.h1.Deliver(c) {
			c.Close()
		}
		return
	}
	e.serveH2(c, &st, h, fd.fast)
}

// tlsStateKey holds a TLS connection's state in its requests' context (connTLSState).
type tlsStateKey struct{}

// connTLSState keeps an HTTP/1.1 connection's TLS state for its requests: net/http fills
// Request.TLS only for a *tls.Conn, and h1's guard and the fast path's hand-over wrap it.
func connTLSState(ctx context.Context, c net.Conn) context.Context {
	for {
		if tc, ok := c.(*tls.Conn); ok {
			st := tc.ConnectionState()
			return context.WithValue(ctx, tlsStateKey{}, &st)
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return ctx
		}
		c = w.NetConn()
	}
}

// withTLSState sets Request.TLS from connTLSState's (a client certificate's check needs it:
// tiers.client_ca_file, edge/tiermtls.go).
func withTLSState(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st, ok := r.Context().Value(tlsStateKey{}).(*tls.ConnectionState); ok && r.TLS == nil {
			r.TLS = st
		}
		h.ServeHTTP(w, r)
	})
}

// serveH2 serves an HTTP/2 connection (ALPN h2 with its TLS state, or h2c with prior knowledge
// on the plain listener) until it ends: each stream a fresh memory hit is answered by the
// listener's fast path (fast, nil when it is off), every other one through h.
func (e *Edge) serveH2(c net.Conn, st *tls.ConnectionState, h http.Handler, fast *fastpath.Server) {
	raddr := c.RemoteAddr().String() // once a connection, not a stream (6% of a small hit's CPU)
	cfg := h2.Config{MaxHeaderBytes: clientMaxHead, IdleTimeout: clientIdle, PrefaceTimeout: clientReadHeader,
		WriteTimeout: time.Duration(e.cfg.ClientTimeout)}
	if fast != nil {
		cfg.Inline = fast.TryH2 // a small hit is answered on the connection's reader
	}
	conn := h2.NewConn(c, cfg, func(s *h2.Stream) {
		if fast != nil && fast.ServeH2(s) {
			return
		}
		h2.ServeHandler(s, h, h2.HandlerOptions{RemoteAddr: raddr, TLS: st})
	})
	if !e.h2.track(conn, true) {
		c.Close()
		return
	}
	conn.Serve()
	e.h2.track(conn, false)
}

// TLSAddr is the TLS listener's address, or "" without one.
func (e *Edge) TLSAddr() string {
	if e.front == nil {
		return ""
	}
	return e.front.addr.String()
}

// shutdown closes the TLS and HTTP/3 listeners, letting requests in flight finish (up to ctx).
func (fd *frontDoor) shutdown(ctx context.Context) error {
	errs := []error{fd.ln.Close()}
	if fd.fast != nil {
		fd.fast.Close(2 * time.Second)
	}
	if err := fd.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fd.srv.Close())
	}
	if fd.h3 != nil {
		errs = append(errs, fd.h3.Shutdown(ctx))
	}
	fd.certs.Close()
	return errors.Join(errs...)
}

// sniffH2C takes the plain listener's connections when the fast path is off: each one whose
// first bytes are the HTTP/2 preface is served as h2c, every other one goes to net/http through
// hand (with the bytes read), as the fast path hands them over.
func (e *Edge) sniffH2C(ln net.Listener, hand *h1.Handover) {
	defer hand.Close()
	e.acceptLoop(ln, "edge accept", func(c net.Conn) {
		pre, h2c := readPrefaceLine(c)
		pc := &h1.PrefixConn{Conn: c, Pre: pre}
		switch {
		case h2c:
			e.serveH2(pc, nil, e, nil)
		case !hand.Deliver(pc):
			c.Close()
		}
	})
}

// readPrefaceLine reads a new connection's first bytes (within the read-header timeout) until
// they are the HTTP/2 preface's first line, or cannot be; it returns them.
func readPrefaceLine(c net.Conn) (pre []byte, h2c bool) {
	_ = c.SetReadDeadline(time.Now().Add(clientReadHeader))
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, len(h2.PrefaceLine))
	n := 0
	for n < len(buf) {
		k, err := c.Read(buf[n:])
		n += k
		if err != nil || !bytes.HasPrefix(h2.PrefaceLine, buf[:n]) {
			break
		}
	}
	return buf[:n], bytes.Equal(buf[:n], h2.PrefaceLine)
}
