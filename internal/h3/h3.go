// Package h3 is the HTTP/3 listener of the HTTP stops (the edge, and L7 once its exchange takes
// HTTP/3 streams): quic-go's HTTP/3 server on UDP sockets the stop opened (or inherited in a
// hitless upgrade, keeping the old process's QUIC connections: steer.go), serving the stop's
// http.Handler, and the Alt-Svc value its TCP listeners advertise it with. One package, so both
// stops speak HTTP/3 the same way.
package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// Options tune a Server.
type Options struct {
	// MaxHeaderBytes bounds a request's header section (HEADERS frame); 0: net/http's default.
	MaxHeaderBytes int
	// IdleTimeout closes a connection without requests for this long; 0: 2 minutes.
	IdleTimeout time.Duration
	// AltSvcMaxAge is how long clients may remember the HTTP/3 endpoint; 0: one day.
	AltSvcMaxAge time.Duration
	// Log takes quic-go's own log lines; nil discards them.
	Log *slog.Logger
	// ValidateAbove is how many new connection attempts a second are taken on the client's
	// word; past it each must first prove its address with a Retry (RFC 9000 8.1.2), which
	// costs one round trip and stops a spoofed flood from making the server work. 0: 1,000;
	// negative: always (tests).
	ValidateAbove int
	// ConnectionIDs issues the server's connection IDs; nil: quic-go's random ones. Behind a
	// balancer that routes QUIC by connection ID, a generator naming this server
	// (internal/quiclb) keeps a client that changes its address on this server. Steered across
	// upgrades (steer.go), its IDs' first bytes (quicsteer.PrefixLen) lead IDs that also name
	// the process generation.
	ConnectionIDs quic.ConnectionIDGenerator
	// DrainTimeout bounds how long a process that a successor replaced keeps serving its QUIC
	// connections (when steered) before it asks them to go (GOAWAY); 0: IdleTimeout.
	DrainTimeout time.Duration
}

// Server serves one http.Handler over HTTP/3 on one or more UDP sockets (a SO_REUSEPORT group)
// of one address.
type Server struct {
	srv    *http3.Server
	udp    *UDP
	lns    []*quic.EarlyListener
	trs    []*quic.Transport
	altSvc string
	load   attempts
	drain  time.Duration
	log    *slog.Logger
	active atomic.Int64 // connections being served
}

// Serve starts serving h on u's sockets with tc's certificates (its ALPN list is replaced by h3)
// and returns at once. A steered u takes the new connections of its address from here on.
func Serve(u *UDP, tc *tls.Config, h http.Handler, o Options) (*Server, error) {
	if len(u.Conns) == 0 {
		return nil, errors.New("serve http/3: no UDP socket")
	}
	port := u.Conns[0].LocalAddr().(*net.UDPAddr).Port
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = o.IdleTimeout
	}
	if o.AltSvcMaxAge == 0 {
		o.AltSvcMaxAge = 24 * time.Hour
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.ValidateAbove == 0 {
		o.ValidateAbove = 1000
	}
	s := &Server{
		srv: &http3.Server{
			Handler: h, TLSConfig: http3.ConfigureTLSConfig(tc.Clone()), MaxHeaderBytes: o.MaxHeaderBytes,
			IdleTimeout: o.IdleTimeout, Logger: o.Log,
			// 0-RTT stays off (Allow0RTT false), so no request can be replayed.
			QUICConfig: &quic.Config{MaxIdleTimeout: o.IdleTimeout},
		},
		udp:    u,
		altSvc: fmt.Sprintf(`h3=":%d"; ma=%d`, port, int(o.AltSvcMaxAge.Seconds())),
		load:   attempts{limit: o.ValidateAbove},
		drain:  o.DrainTimeout,
		log:    o.Log,
	}
	for _, c := range u.Conns {
		// quic-go asks for address validation only when told to (VerifySourceAddress); under
		// load is when a spoofed flood would otherwise cost handshakes.
		tr := &quic.Transport{Conn: c, ConnectionIDGenerator: o.ConnectionIDs, VerifySourceAddress: func(net.Addr) bool { return s.load.over(time.Now()) }}
		if u.steer != nil {
			tr.ConnectionIDGenerator = cidGen{inner: o.ConnectionIDs, gen: u.gen}
		}
		ln, err := tr.ListenEarly(s.srv.TLSConfig, s.srv.QUICConfig)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("serve http/3 on %s: %w", c.LocalAddr(), err)
		}
		s.trs, s.lns = append(s.trs, tr), append(s.lns, ln)
		go func() {
			if err := s.accept(ln); err != nil {
				s.log.Error("http/3 stopped accepting connections", "address", c.LocalAddr().String(), "err", err)
			}
		}()
	}
	if u.steer != nil {
		if err := u.steer.SetNewest(u.gen); err != nil {
			s.close()
			return nil, fmt.Errorf("serve http/3 on %s: %w", s.Addr(), err)
		}
	}
	return s, nil
}

// accept serves ln's connections until it closes. Each is served through ServeQUICConn so that
// Shutdown can wait for the connections themselves, not only their requests.
func (s *Server) accept(ln *quic.EarlyListener) error {
	for {
		c, err := ln.Accept(context.Background())
		if errors.Is(err, quic.ErrServerClosed) || errors.Is(err, quic.ErrTransportClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		s.active.Add(1)
		go func() {
			defer s.active.Add(-1)
			if err := s.srv.ServeQUICConn(c); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Debug("http/3 connection ended", "remote", c.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

// attempts counts new connection attempts per second, to ask for address validation past a
// limit.
type attempts struct {
	limit  int
	mu     sync.Mutex
	second int64
	n      int
}

// over counts an attempt at now and reports whether this second's are past the limit.
func (a *attempts) over(now time.Time) bool {
	if a.limit < 0 {
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if sec := now.Unix(); sec != a.second {
		a.second, a.n = sec, 0
	}
	a.n++
	return a.n > a.limit
}

// Addr is the UDP address served.
func (s *Server) Addr() net.Addr { return s.udp.Conns[0].LocalAddr() }

// AltSvc is the Alt-Svc field value that advertises this endpoint on the same host (RFC 7838),
// e.g. `h3=":8443"; ma=86400`.
func (s *Server) AltSvc() string { return s.altSvc }

// Advertise wraps h so that its responses carry the Alt-Svc of s (for the TCP listeners of
// the same address: a browser learns of HTTP/3 from an HTTPS response).
func (s *Server) Advertise(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Alt-Svc"] = []string{s.altSvc}
		h.ServeHTTP(w, r)
	})
}

// Shutdown stops taking new connections. When a successor takes them now (steered), the open
// connections go on being served until they end or the drain timeout passes; then (or at
// once) each is asked to go (GOAWAY), the requests running finish (within the time ctx gave,
// counted from then), and the sockets close.
func (s *Server) Shutdown(ctx context.Context) error {
	// A ctx already done asks for a hard stop: no drain.
	if s.udp.steer != nil && ctx.Err() == nil && s.udp.steer.Superseded(s.udp.gen) {
		var cancel context.CancelFunc
		ctx, cancel = s.drainConns(ctx)
		defer cancel()
	}
	var errs []error
	for _, ln := range s.lns {
		errs = append(errs, ln.Close())
	}
	if err := s.srv.Shutdown(ctx); err != nil {
		errs = append(errs, err, s.srv.Close())
	}
	return errors.Join(append(errs, s.close())...)
}

// drainConns waits until the connections end or the drain timeout passes, and returns ctx's
// grace counted from then. The listeners stay open meanwhile: new clients reach the successor
// (steered), and a handshake that began here before it served can finish instead of being
// refused.
func (s *Server) drainConns(ctx context.Context) (context.Context, context.CancelFunc) {
	s.log.Info("http/3: a new process takes new connections; serving the open ones until they end", "address", s.Addr().String(), "connections", s.active.Load(), "drain_timeout", s.drain.String())
	d, hasGrace := ctx.Deadline()
	grace := time.Until(d)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for end := time.Now().Add(s.drain); s.active.Load() > 0; <-tick.C {
		if time.Now().After(end) {
			s.log.Info("http/3: drain timeout; asking the open connections to go", "address", s.Addr().String(), "connections", s.active.Load())
			break
		}
	}
	if !hasGrace {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(context.WithoutCancel(ctx), grace)
}

// close closes the transports (and their connections) and the sockets.
func (s *Server) close() error {
	var errs []error
	for _, tr := range s.trs {
		errs = append(errs, tr.Close())
	}
	for _, c := range s.udp.Conns {
		c.Close()
	}
	if s.udp.steer != nil {
		errs = append(errs, s.udp.steer.Close())
	}
	return errors.Join(errs...)
}
