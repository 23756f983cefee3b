// Package h3 is the HTTP/3 listener of the HTTP stops (the edge, and L7 once its exchange takes
// HTTP/3 streams): quic-go's HTTP/3 server on UDP sockets the stop opened (or inherited in a
// hitless upgrade), serving the stop's http.Handler, and the Alt-Svc value its TCP listeners
// advertise it with. One package, so both stops speak HTTP/3 the same way.
package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/switchyard/switchyard/internal/handover"
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
	// (internal/quiclb) keeps a client that changes its address on this server.
	ConnectionIDs quic.ConnectionIDGenerator
}

// Server serves one http.Handler over HTTP/3 on one or more UDP sockets (a SO_REUSEPORT group)
// of one address.
type Server struct {
	srv    *http3.Server
	conns  []net.PacketConn
	trs    []*quic.Transport
	altSvc string
	errc   chan error
	load   attempts
}

// Serve starts serving h on conns with tc's certificates (its ALPN list is replaced by h3) and
// returns at once; Err reports a socket that stopped serving.
func Serve(conns []net.PacketConn, tc *tls.Config, h http.Handler, o Options) (*Server, error) {
	if len(conns) == 0 {
		return nil, errors.New("serve http/3: no UDP socket")
	}
	port := conns[0].LocalAddr().(*net.UDPAddr).Port
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 2 * time.Minute
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
		conns:  conns,
		altSvc: fmt.Sprintf(`h3=":%d"; ma=%d`, port, int(o.AltSvcMaxAge.Seconds())),
		errc:   make(chan error, len(conns)),
		load:   attempts{limit: o.ValidateAbove},
	}
	for _, c := range conns {
		// quic-go asks for address validation only when told to (VerifySourceAddress); under
		// load is when a spoofed flood would otherwise cost handshakes.
		tr := &quic.Transport{Conn: c, ConnectionIDGenerator: o.ConnectionIDs, VerifySourceAddress: func(net.Addr) bool { return s.load.over(time.Now()) }}
		ln, err := tr.ListenEarly(s.srv.TLSConfig, s.srv.QUICConfig)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("serve http/3 on %s: %w", c.LocalAddr(), err)
		}
		s.trs = append(s.trs, tr)
		go func() {
			err := s.srv.ServeListener(ln)
			if errors.Is(err, http.ErrServerClosed) || errors.Is(err, quic.ErrServerClosed) {
				err = nil
			}
			s.errc <- err
		}()
	}
	return s, nil
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
func (s *Server) Addr() net.Addr { return s.conns[0].LocalAddr() }

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

// Shutdown stops taking new connections and requests, waits for those running (up to ctx),
// then closes the sockets.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	return errors.Join(err, s.close())
}

// close closes the transports and their sockets.
func (s *Server) close() error {
	var errs []error
	for _, tr := range s.trs {
		errs = append(errs, tr.Close())
	}
	for _, c := range s.conns {
		c.Close()
	}
	return errors.Join(errs...)
}

// ListenUDP binds (or, in a hitless upgrade, inherits through sk) the UDP socket of a TLS
// listener's HTTP/3: the same address as its TCP listener tcp, configured as address (the name
// the socket passes to the next process under).
func ListenUDP(sk *handover.Sockets, address string, tcp *net.TCPAddr) ([]net.PacketConn, error) {
	udp, err := sk.ListenUDP(address, func() ([]*net.UDPConn, error) {
		uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: tcp.IP, Port: tcp.Port})
		if err != nil {
			return nil, fmt.Errorf("listen on udp %s: %w (HTTP/3 needs the TLS port free on UDP too)", net.JoinHostPort(tcp.IP.String(), strconv.Itoa(tcp.Port)), err)
		}
		return []*net.UDPConn{uc}, nil
	})
	if err != nil {
		return nil, err
	}
	conns := make([]net.PacketConn, len(udp))
	for i, c := range udp {
		conns[i] = c
	}
	return conns, nil
}
