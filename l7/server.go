package l7

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/internal/connlimit"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/h2"
	"github.com/switchyard/switchyard/internal/h3"
	"github.com/switchyard/switchyard/internal/handover"
	"github.com/switchyard/switchyard/internal/lograte"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// Server is an L7 proxy instance. It is safe for concurrent use; Reload swaps its configuration
// while it serves.
type Server struct {
	state   atomic.Pointer[state]
	proxy   *httputil.ReverseProxy
	metrics *metrics
	log     *slog.Logger
	access  *accessLog // nil: off (accesslog.go)
	// decisions counts backend picks (one per attempt): the L7 tier's cost per request.
	decisions atomic.Int64
	// served counts requests by the engine that served them (engines.go).
	served servedCounts

	mu      sync.Mutex
	servers []*http.Server
	lns     []net.Listener
	fconns  map[*goConn]struct{}    // connections on the goroutine engine
	h2conns map[*h2.Conn]struct{}   // HTTP/2 connections (engine_h2.go)
	noH2C   map[*h1.Handover]bool   // listeners (by their net/http hand-over) without h2c: TLS ones, plain ones without it
	altSvc  map[*h1.Handover][]byte // TLS listeners with HTTP/3: their Alt-Svc header line
	// certHeader: TLS listeners with client_auth: the field the verified client subject goes in
	certHeader map[*h1.Handover][]byte
	h3         []*h3.Server      // the HTTP/3 listeners (l7/http3.go)
	conns      *connlimit.Budget // client and upstream connections against the descriptor room (conns.go)
	shutting   atomic.Bool       // stop accepting, close connections at their next request boundary
	// hard: no connection accepted from now on is served (Close, or Shutdown done). Until then a
	// connection accepted while shutting down still gets its request answered: after an upgrade
	// the old process may accept from the shared listener up to the moment it closes its copy.
	hard atomic.Bool
	// pending counts connections accepted and not yet tracked (TLS handshakes, connections
	// posted from one event loop to another), so that Shutdown waits for them.
	pending atomic.Int64
	// the event loops (engine_loop_linux.go), started with the first plain listener
	noLoops      bool
	loops        []*evLoop
	loopOnce     sync.Once
	loopsStopped bool
	loopsDone    chan struct{} // closed when the loops stop
	loopNext     atomic.Uint64 // round robin of accepted connections over the loops
	path         string        // config file, for Reload from the admin endpoint and SIGHUP
	sockets      *handover.Sockets
	// acme is the TLS listeners' certificates that have an acme: block, set by Listen before
	// anything serves; their HTTP-01 challenges are answered on every plain listener.
	acme        []*tlsconf.Certs
	acmeMetrics *tlsconf.Metrics
	handshakes  *tlsconf.Handshakes // TLS listeners' handshakes, failures counted and logged
	warns       lograte.Limiter     // per-connection warnings, one line a second each
	// fdLimit, when set, is the descriptor limit the budget is cut from instead of the process's
	// (tests: a small budget without lowering the test binary's own limit).
	fdLimit uint64
}

// Option tunes NewServer.
type Option func(*Server)

// WithLogger sets the operational logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// WithoutEventLoops serves plain HTTP/1.1 with a goroutine per connection instead of the event
// loops (for comparison, and for platforms without epoll).
func WithoutEventLoops() Option { return func(s *Server) { s.noLoops = true } }

// WithSockets listens through sk: listeners inherited from the process this one replaces are
// served instead of bound again, and every listener is kept to pass on (internal/handover).
func WithSockets(sk *handover.Sockets) Option { return func(s *Server) { s.sockets = sk } }

// WithConfigPath remembers the file the configuration came from, so ReloadFile can re-read it.
func WithConfigPath(path string) Option { return func(s *Server) { s.path = path } }

// NewServer builds a proxy from cfg and starts its health checkers. It does not listen; call
// Serve with a listener, or ListenAndServe for the configured listeners.
func NewServer(cfg *Config, opts ...Option) (*Server, error) {
	s := &Server{metrics: newMetrics(), log: slog.Default(), fconns: map[*goConn]struct{}{}, h2conns: map[*h2.Conn]struct{}{}, noH2C: map[*h1.Handover]bool{}, altSvc: map[*h1.Handover][]byte{}, certHeader: map[*h1.Handover][]byte{}, loopsDone: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	s.conns = s.newBudget(cfg.Limits.MaxConnections)
	s.acmeMetrics = tlsconf.NewMetrics(s.metrics.reg)
	s.handshakes = tlsconf.NewHandshakes(s.metrics.reg, s.log)
	s.metrics.reg.MustRegister(s.served.collectors()...)
	if err := s.openAccessLog(cfg.AccessLog, cfg.AccessLogFormat); err != nil {
		return nil, err
	}
	st, err := s.buildState(cfg, nil)
	if err != nil {
		return nil, fmt.Errorf("build proxy: %w", err)
	}
	s.proxy = s.newReverseProxy()
	s.startHealth(st)
	s.state.Store(st)
	return s, nil
}

func (s *Server) openAccessLog(dest, format string) error {
	a, err := openAccessLog(dest, format)
	s.access = a
	return err
}

// ReopenAccessLog reopens a file access log under its path (after logrotate moved it; the
// `l7 run` process does it on SIGUSR1).
func (s *Server) ReopenAccessLog() error { return s.access.Reopen() }

// Decisions returns how many balancing decisions (backend picks) the server has made.
func (s *Server) Decisions() int64 { return s.decisions.Load() }

// Config returns the configuration in effect.
func (s *Server) Config() *Config { return s.state.Load().cfg }

// Reload swaps in a new configuration. On error the old one stays in effect and keeps serving.
// Listener and access-log changes need a restart; routes, pools and limits change at once.
func (s *Server) Reload(cfg *Config) error {
	old := s.state.Load()
	st, err := s.buildState(cfg, old)
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("reload: %w", err)
	}
	s.startHealth(st)
	s.state.Store(st)
	s.retire(old, st) // retire.go: the old pools close when their last request ends
	s.metrics.reloads.WithLabelValues("ok").Inc()
	s.log.Info("configuration reloaded", "routes", len(cfg.Routes), "pools", len(cfg.Pools))
	return nil
}

// ReloadFile re-reads the configuration file given with WithConfigPath.
func (s *Server) ReloadFile() error {
	if s.path == "" {
		return errors.New("reload: no configuration file; the server was built from memory")
	}
	cfg, err := LoadConfig(s.path)
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		return fmt.Errorf("reload: %w", err)
	}
	return s.Reload(cfg)
}

// httpServer is a client-facing http.Server with the configured timeouts.
func (s *Server) httpServer(h http.Handler, h2c bool, scheme string) *http.Server {
	cfg := s.state.Load().cfg
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.Timeouts.ReadHeader,
		IdleTimeout:       cfg.Timeouts.Idle,
		MaxHeaderBytes:    cfg.Limits.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return context.WithValue(context.Background(), schemeKey, scheme) },
		Protocols:         new(http.Protocols),
		ConnState: func(c net.Conn, cs http.ConnState) {
			if g, ok := c.(*h1.GuardConn); ok {
				g.SetActive(cs == http.StateActive)
			}
			if _, ok := c.(*tls.Conn); ok && (cs == http.StateClosed || cs == http.StateHijacked) {
				s.conns.Done() // an HTTP/2 connection ServeTLS admitted
			}
		},
	}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(h2c)
	s.mu.Lock()
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	return srv
}

func (s *Server) guard(ln net.Listener) net.Listener {
	return &h1.GuardListener{Listener: ln, MaxHeaderBytes: s.state.Load().cfg.Limits.MaxHeaderBytes, OnReject: s.onReject}
}

func (s *Server) onReject(remote net.Addr, r *h1.Rejection) {
	s.metrics.refused.WithLabelValues(fmt.Sprint(r.Status)).Inc()
	s.log.Debug("request refused", "client", remote.String(), "status", r.Status, "reason", r.Reason)
}

// Serve accepts plain HTTP/1.1 and h2c connections on ln until Shutdown. HTTP/1.1 requests are
// served by the request core on the event loops or the goroutine engine; the rest go to net/http.
func (s *Server) Serve(ln net.Listener) error {
	return s.serveFast(ln, true, "http")
}

// serveFast accepts connections on ln and serves them on the event loops (a plain TCP
// listener, unless turned off) or the goroutine engine; connections the core cannot serve go to
// an http.Server (HTTP/1.1 with the guard, and h2c when allowed) on the same handler.
func (s *Server) serveFast(ln net.Listener, h2c bool, scheme string) error {
	fb := h1.NewHandover(ln.Addr())
	srv := s.httpServer(s, h2c, scheme)
	s.mu.Lock()
	s.lns = append(s.lns, ln, fb)
	s.noH2C[fb] = !h2c
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
	s.acceptLoop(ln, func(c net.Conn) { s.serveConn(c, scheme, fb) })
	return nil
}

// acceptLoop accepts ln's connections until it closes or the server shuts down, admits each
// through the connection budget (one over it is answered 503 and closed) and serves it on a
// goroutine of its own, counted in s.pending until serve tracks it.
func (s *Server) acceptLoop(ln net.Listener, serve func(net.Conn)) {
	var backoff connlimit.AcceptBackoff
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.shutting.Load() {
				return
			}
			delay := backoff.Failed()
			s.log.Warn("l7 accept", "error", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		backoff.Accepted()
		if !s.conns.Admit() {
			s.conns.Refuse(c)
			continue
		}
		s.pending.Add(1) // until tracked: Shutdown waits for it
		go func() {
			if pl, ok := ln.(*proxyListener); ok {
				pc, err := pl.header(c)
				if err != nil {
					s.warns.Warn(s.log, "l7 proxy protocol", "error", err)
					c.Close()
					s.conns.Done()
					s.pending.Add(-1)
					return
				}
				c = pc
			}
			serve(c)
		}()
	}
}

func (s *Server) serve(ln net.Listener, h http.Handler, h2c bool, scheme string) error {
	err := s.httpServer(h, h2c, scheme).Serve(s.guard(ln))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeTLS terminates TLS on ln with the given configuration (certificates chosen by SNI) and
// serves HTTP/2 to clients that negotiate it by ALPN and HTTP/1.1 to the rest.
func (s *Server) ServeTLS(ln net.Listener, tc *tls.Config) error { return s.serveTLS(ln, tc, nil, "") }

// serveTLS is ServeTLS, advertising the HTTP/3 listener h3s (when not nil) on every response,
// and with client_auth passing each verified client subject upstream in certHeader ("": none).
func (s *Server) serveTLS(ln net.Listener, tc *tls.Config, h3s *h3.Server, certHeader string) error {
	// A configuration answering TLS-ALPN-01 (tlsconf.Open) keeps acme-tls/1.
	acme := slices.Contains(tc.NextProtos, tlsconf.ACMETLS1)
	tc = tc.Clone()
	tc.NextProtos = []string{"h2", "http/1.1"}
	if acme {
		tc.NextProtos = append(tc.NextProtos, tlsconf.ACMETLS1)
	}
	var h http.Handler = s
	if h3s != nil {
		h = h3s.Advertise(s)
	}
	srv := s.httpServer(h, false, "https")
	if certHeader != "" {
		srv.BaseContext = func(net.Listener) context.Context {
			return context.WithValue(context.WithValue(context.Background(), schemeKey, "https"), certHeaderKey, certHeader)
		}
	}
	srv.Protocols.SetHTTP2(true)
	srv.TLSConfig = tc
	// The handshake happens here, not in http.Server, so that HTTP/1.1 connections can take the
	// goroutine engine (and the request-head guard when handed over); HTTP/2 ones stay *tls.Conn so
	// http.Server runs its HTTP/2 server on them (HTTP/2 framing has no smuggling ambiguity).
	conns := h1.NewHandover(ln.Addr())
	s.mu.Lock()
	s.lns = append(s.lns, conns, ln)
	s.noH2C[conns] = true // over TLS HTTP/2 comes by ALPN only, never as a preface on HTTP/1.1
	if h3s != nil {
		s.altSvc[conns] = []byte("Alt-Svc: " + h3s.AltSvc() + "\r\n")
	}
	if certHeader != "" {
		s.certHeader[conns] = []byte(certHeader)
	}
	s.mu.Unlock()
	go func() {
		defer conns.Close()
		s.acceptLoop(ln, func(raw net.Conn) { s.handshake(raw, tc, srv.ReadHeaderTimeout, conns) })
	}()
	err := srv.Serve(conns)
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (s *Server) handshake(raw net.Conn, tc *tls.Config, timeout time.Duration, conns *h1.Handover) {
	c := tls.Server(newTLSWire(raw), tc) // the wire lets an event loop take the connection over
	if err := s.handshakes.Run(c, timeout); err != nil {
		raw.Close()
		s.conns.Done()
		s.pending.Add(-1)
		return
	}
	cs := c.ConnectionState()
	if cs.NegotiatedProtocol == tlsconf.ACMETLS1 {
		// A TLS-ALPN-01 validation: the CA wanted the certificate and sends no request.
		c.Close()
		s.conns.Done()
		s.pending.Add(-1)
		return
	}
	if cs.NegotiatedProtocol == "h2" {
		s.pending.Add(-1) // serveH2 registers it at once
		// HTTP/2 takes the h2 engine (engine_h2.go).
		s.serveH2(c, "https", &cs, s.altSvcOf(conns), s.certHeaderOf(conns))
		s.conns.Done()
		return
	}
	// HTTP/1.1 over TLS takes the goroutine engine; it hands over to srv like plain HTTP.
	s.serveConn(c, "https", conns)
}

// openCerts opens the TLS listeners' certificates (nil for plain listeners), remembering those
// obtained by ACME so that the plain listeners answer their HTTP-01 challenges.
func (s *Server) openCerts(cfg *Config) ([]*tlsconf.Certs, error) {
	certs := make([]*tlsconf.Certs, len(cfg.Listeners))
	for i, l := range cfg.Listeners {
		if l.TLS == nil {
			continue
		}
		c, err := tlsconf.Open(l.TLS, tlsconf.Options{Log: s.log, Metrics: s.acmeMetrics})
		if err != nil {
			return nil, fmt.Errorf("listen on %s: tls: %w", l.Address, err)
		}
		certs[i] = c
		if l.TLS.ACME != nil {
			s.acme = append(s.acme, c)
		}
	}
	return certs, nil
}

// acmeFirst answers the CA's HTTP-01 requests before h sees them. The request core hands them
// to net/http (clientConn.route) so that every engine reaches here or ServeHTTP.
func (s *Server) acmeFirst(h http.Handler) http.Handler {
	if len(s.acme) == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.answerACME(w, r) {
			h.ServeHTTP(w, r)
		}
	})
}

// answerACME answers an HTTP-01 challenge request of the listeners' ACME certificates.
func (s *Server) answerACME(w http.ResponseWriter, r *http.Request) bool {
	for _, c := range s.acme {
		if c.HandleHTTPChallenge(w, r) {
			return true
		}
	}
	return false
}

// redirectHandler answers every request with a permanent redirect to https on port.
func redirectHandler(port int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		target := "https://" + net.JoinHostPort(host, fmt.Sprint(port)) + r.URL.RequestURI()
		if port == 443 {
			target = "https://" + host + r.URL.RequestURI()
		}
		http.Redirect(w, r, target, http.StatusPermanentRedirect)
	})
}

// ListenAndServe opens every configured listener and the admin endpoint and serves until ctx is
// done, then shuts down gracefully: listeners close, in-flight requests get up to the total
// timeout to finish.
func (s *Server) ListenAndServe(ctx context.Context) error {
	errc, err := s.Listen()
	if err != nil {
		return err
	}
	return s.Wait(ctx, errc)
}

// Listen opens (or, with WithSockets, inherits) every configured listener and the admin
// endpoint and serves them in the background; the channel reports a listener that fails.
func (s *Server) Listen() (<-chan error, error) {
	cfg := s.state.Load().cfg
	errc := make(chan error, len(cfg.Listeners)+1)
	var lns []net.Listener
	fail := func(err error) (<-chan error, error) {
		for _, ln := range lns {
			ln.Close()
		}
		for _, c := range s.acme {
			c.Close()
		}
		return nil, err
	}
	certs, err := s.openCerts(cfg)
	if err != nil {
		return nil, err
	}
	var plain string // the first plain listener: where the CA's HTTP-01 requests arrive
	for i, l := range cfg.Listeners {
		ln, err := s.sockets.Listen("tcp", l.Address)
		if errors.Is(err, syscall.EADDRNOTAVAIL) {
			return fail(fmt.Errorf("listen on %s: %w (a VIP must be on an interface first, e.g. ip addr add VIP/32 dev lo)", l.Address, err))
		}
		if err != nil {
			return fail(fmt.Errorf("listen on %s: %w", l.Address, err))
		}
		if pp := l.ProxyProtocol; pp != nil {
			trusted, _ := pp.prefixes() // validated with the configuration
			ln = &proxyListener{Listener: ln, trusted: trusted, timeout: cfg.Timeouts.ReadHeader}
		}
		lns = append(lns, ln)
		switch {
		case l.TLS != nil:
			var h3s *h3.Server
			if l.HTTP3 {
				var err error
				if h3s, err = s.listenHTTP3(l, ln.Addr().(*net.TCPAddr), certs[i].TLS); err != nil {
					return fail(err)
				}
			}
			go func() { errc <- s.serveTLS(ln, certs[i].TLS, h3s, l.TLS.SubjectHeader()) }()
		case l.RedirectHTTPS > 0:
			go func() { errc <- s.serve(ln, s.acmeFirst(redirectHandler(l.RedirectHTTPS)), false, "http") }()
		default:
			go func() { errc <- s.serveFast(ln, l.H2C, "http") }()
		}
		if l.TLS == nil && plain == "" {
			plain = ln.Addr().String()
		}
		s.log.Info("l7 listening", "address", ln.Addr().String(), "tls", l.TLS != nil, "h2c", l.H2C, "http3", l.HTTP3)
	}
	for i, l := range cfg.Listeners {
		if err := certs[i].Manage(plain, lns[i].Addr().String()); l.TLS != nil && err != nil {
			return fail(err)
		}
	}
	if cfg.Admin.Address != "" {
		ln, err := s.sockets.Listen("tcp", cfg.Admin.Address)
		if err != nil {
			return fail(fmt.Errorf("listen on admin %s: %w", cfg.Admin.Address, err))
		}
		lns = append(lns, ln)
		go func() {
			err := s.httpServer(s.AdminHandler(), false, "http").Serve(ln)
			if errors.Is(err, http.ErrServerClosed) {
				err = nil
			}
			errc <- err
		}()
		s.log.Info("l7 admin listening", "address", ln.Addr().String())
	}
	s.mu.Lock()
	s.lns = append(s.lns, lns...)
	s.mu.Unlock()
	return errc, nil
}

// Wait serves until ctx is done (then shuts down gracefully, like ListenAndServe) or a listener
// of errc fails.
func (s *Server) Wait(ctx context.Context, errc <-chan error) error {
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil {
			s.Close()
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.state.Load().cfg.Timeouts.Total)
	defer cancel()
	return s.Shutdown(sctx)
}

// Shutdown stops accepting, waits for in-flight requests (until ctx ends) and stops checkers.
func (s *Server) Shutdown(ctx context.Context) error {
	servers := s.stopAccepting()
	var first error
	// Fast-path connections between requests close now; busy ones close after their response.
	for s.closeFast(false) > 0 {
		select {
		case <-ctx.Done():
			s.closeFast(true)
			first = fmt.Errorf("shut down: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
			continue
		}
		break
	}
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil && first == nil {
			first = fmt.Errorf("shut down: %w", err)
		}
	}
	if err := s.shutdownHTTP3(ctx); err != nil && first == nil {
		first = fmt.Errorf("shut down: %w", err)
	}
	s.hard.Store(true)
	s.stop()
	return first
}

// Close stops everything at once, cutting in-flight requests.
func (s *Server) Close() error {
	s.hard.Store(true)
	servers := s.stopAccepting()
	s.closeFast(true)
	for _, srv := range servers {
		srv.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // at once
	_ = s.shutdownHTTP3(ctx)
	s.stop()
	return nil
}

// stopAccepting marks the server as shutting down and closes its listeners; it returns the
// http.Servers still to be shut down.
func (s *Server) stopAccepting() []*http.Server {
	s.mu.Lock()
	servers, lns := s.servers, s.lns
	s.mu.Unlock()
	s.shutting.Store(true)
	for _, ln := range lns {
		ln.Close()
	}
	return servers
}

func (s *Server) stop() {
	s.stopLoops()
	for _, c := range s.acme {
		c.Close()
	}
	st := s.state.Load()
	st.cancel()
	for _, p := range st.pools {
		p.closeIdle()
	}
	s.access.Close()
}

// bufferPool recycles the 32 KiB copy buffers of ReverseProxy.
type bufferPool struct{}

var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(copyBuffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { copyBuffers.Put(&b) }
