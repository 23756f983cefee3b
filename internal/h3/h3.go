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
}

// Server serves one http.Handler over HTTP/3 on one or more UDP sockets (a SO_REUSEPORT group)
// of one address.
type Server struct {
	srv    *http3.Server
	conns  []net.PacketConn
	altSvc string
	errc   chan error
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
	s := &Server{
		srv: &http3.Server{
			Handler: h, TLSConfig: http3.ConfigureTLSConfig(tc.Clone()), MaxHeaderBytes: o.MaxHeaderBytes,
			IdleTimeout: o.IdleTimeout, Logger: o.Log,
			// Address validation (a Retry) only for a client whose address is unproven and only
			// under load is quic-go's default; 0-RTT stays off, so no request can be replayed.
			QUICConfig: &quic.Config{MaxIdleTimeout: o.IdleTimeout},
		},
		conns:  conns,
		altSvc: fmt.Sprintf(`h3=":%d"; ma=%d`, port, int(o.AltSvcMaxAge.Seconds())),
		errc:   make(chan error, len(conns)),
	}
	for _, c := range conns {
		go func() {
			err := s.srv.Serve(c)
			if errors.Is(err, http.ErrServerClosed) || errors.Is(err, quic.ErrServerClosed) {
				err = nil
			}
			s.errc <- err
		}()
	}
	return s, nil
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
	for _, c := range s.conns {
		c.Close()
	}
	return err
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
