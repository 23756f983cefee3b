package l7

import (
	"context"
	"crypto/tls"
	"errors"
	"net"

	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/h3"
)

// HTTP/3: a TLS listener with http3 also serves HTTP/3 over QUIC on the same port
// (internal/h3, the edge's listener too), and its TCP responses advertise it with Alt-Svc. An
// HTTP/3 request runs the net/http request path (ServeHTTP: routing, admission, rate limits,
// retries, gRPC answers), as HTTP/2 streams the core does not take do.

// listenHTTP3 binds (or inherits) the UDP sockets on tcp's port and serves HTTP/3 there, with
// connection IDs naming this instance when the listener has quic_lb.
func (s *Server) listenHTTP3(l Listener, tcp *net.TCPAddr, tc *tls.Config) (*h3.Server, error) {
	udp, err := h3.ListenUDP(s.sockets, l.Address, tcp, s.log)
	if err != nil {
		return nil, err
	}
	cfg := s.state.Load().cfg
	o := h3.Options{MaxHeaderBytes: cfg.Limits.MaxHeaderBytes, IdleTimeout: cfg.Timeouts.Idle, Log: s.log}
	if l.QUICLB != nil {
		o.ConnectionIDs = l.QUICLB.Generator()
	}
	h3s, err := h3.Serve(udp, tc, s, o)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.h3 = append(s.h3, h3s)
	s.mu.Unlock()
	s.log.Info("l7 http/3 listening", "address", h3s.Addr().String())
	return h3s, nil
}

// certHeaderOf is the client-subject field of the TLS listener behind fb, nil without
// client_auth.
func (s *Server) certHeaderOf(fb *h1.Handover) []byte {
	if fb == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.certHeader[fb]
}

// altSvcOf is the Alt-Svc header line of the listener behind fb, nil when it has no HTTP/3.
func (s *Server) altSvcOf(fb *h1.Handover) []byte {
	if fb == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.altSvc[fb]
}

// shutdownHTTP3 stops the HTTP/3 listeners, letting requests in flight finish up to ctx.
func (s *Server) shutdownHTTP3(ctx context.Context) error {
	s.mu.Lock()
	list := s.h3
	s.h3 = nil
	s.mu.Unlock()
	var errs []error
	for _, h := range list {
		errs = append(errs, h.Shutdown(ctx))
	}
	return errors.Join(errs...)
}
