package dns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/switchyard/switchyard/dns/udpio"
	"github.com/switchyard/switchyard/internal/handover"
)

// tcpDrainIdle is how long, once draining, a TCP client that has sent nothing yet may take to
// send its query; a connection is closed after the answer it is waiting for.
const tcpDrainIdle = time.Second

// bindKept is udpio.Bind through sk: the TCP listener and the UDP group inherited from the
// process this one replaces (under the configured address, so ":0" finds them again), or new
// ones. Either way they are kept to pass on.
func bindKept(sk *handover.Sockets, listen string, n int) ([]*net.UDPConn, *net.TCPListener, error) {
	if sk == nil {
		return udpio.Bind(listen, n)
	}
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return nil, nil, fmt.Errorf("parse listen address %q: write it as address:port, e.g. 127.0.0.1:5353: %w", listen, err)
	}
	if sk.Inherits(handover.Name("tcp", listen)) || ap.Port() != 0 {
		// Inherited, or a fixed port (that systemd may have passed): one socket at a time.
		ln, err := sk.Listen("tcp", listen)
		if err != nil {
			return nil, nil, fmt.Errorf("listen tcp %s: %w", listen, err)
		}
		tcp := ln.(*net.TCPListener)
		bound := tcp.Addr().(*net.TCPAddr).AddrPort()
		conns, err := sk.ListenUDP(listen, func() ([]*net.UDPConn, error) { return udpio.BindUDP(bound, n) })
		if err != nil {
			tcp.Close()
			return nil, nil, err
		}
		return conns, tcp, nil
	}
	conns, tcp, err := udpio.Bind(listen, n)
	if err != nil {
		return nil, nil, err
	}
	if err := sk.Keep(handover.Name("tcp", listen), tcp); err != nil {
		return nil, nil, err
	}
	for _, c := range conns {
		if err := sk.Keep(handover.Name("udp", listen), c); err != nil {
			return nil, nil, err
		}
	}
	return conns, tcp, nil
}

// Shutdown stops reading queries and waits, until ctx ends, for the ones in flight: each UDP
// worker sends the batch it holds, each TCP connection answers the query it is reading. The
// sockets' queues stay for whoever shares them (the process that took over in an upgrade).
// Then it closes like Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if s.closed || s.udp == nil {
		s.mu.Unlock()
		return s.Close()
	}
	s.draining.Store(true)
	now := time.Now()
	for _, c := range s.udpConns {
		c.SetReadDeadline(now) // wakes the workers without closing the socket
	}
	s.tcp.Close()
	for c := range s.tcpConns {
		c.SetReadDeadline(now.Add(tcpDrainIdle))
	}
	s.mu.Unlock()
	var err error
	for {
		s.mu.Lock()
		busy := len(s.tcpConns) > 0 || s.udpLive.Load() > 0
		s.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("shut down dns: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
			continue
		}
		break
	}
	s.Close()
	return err
}
