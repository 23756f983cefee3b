package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// udpBatch is how many datagrams one recvmmsg/sendmmsg call moves: under load a worker answers
// a batch per pair of system calls instead of a pair per query.
const udpBatch = 32

// udpSocketBuffer is the receive and send buffer asked for each UDP socket.
const udpSocketBuffer = 4 << 20

// bindSockets binds n UDP sockets with SO_REUSEPORT on one port, so the kernel spreads clients
// over the workers, and a TCP listener on the same port. With port 0 the port the kernel picks
// for the first UDP socket may be taken for TCP, so it retries a few times.
func bindSockets(listen string, n int) ([]*net.UDPConn, *net.TCPListener, error) {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return nil, nil, fmt.Errorf("parse listen address %q: write it as address:port, e.g. 127.0.0.1:5353: %w", listen, err)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		first, err := lc.ListenPacket(ctx, "udp", ap.String())
		if err != nil {
			return nil, nil, fmt.Errorf("listen udp %s: %w", listen, err)
		}
		conns := []*net.UDPConn{first.(*net.UDPConn)}
		bound := first.LocalAddr().(*net.UDPAddr).AddrPort()
		closeAll := func() {
			for _, c := range conns {
				c.Close()
			}
		}
		for len(conns) < n {
			c, err := lc.ListenPacket(ctx, "udp", bound.String())
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("listen udp %s (worker socket): %w", bound, err)
			}
			conns = append(conns, c.(*net.UDPConn))
		}
		for _, c := range conns {
			// Bursts from large resolvers outrun the default socket buffer (~200 KB); a larger
			// one turns them into latency instead of loss. Best effort: capped by rmem_max.
			c.SetReadBuffer(udpSocketBuffer)
			c.SetWriteBuffer(udpSocketBuffer)
		}
		// TCP without SO_REUSEPORT: a second server on the same port must fail, not share.
		tcp, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(bound))
		if err == nil {
			return conns, tcp, nil
		}
		closeAll()
		if ap.Port() != 0 || attempt >= 5 {
			return nil, nil, fmt.Errorf("listen tcp %s: %w", bound, err)
		}
	}
}

// serveUDP answers datagrams from one socket in batches until it is closed. The ipv4 batch API
// also carries IPv6 datagrams on Linux: recvmmsg does not care about the family.
func (s *Server) serveUDP(conn *net.UDPConn) {
	defer s.wg.Done()
	pc := ipv4.NewPacketConn(conn)
	in := make([]ipv4.Message, udpBatch)
	for i := range in {
		in[i].Buffers = [][]byte{make([]byte, 65535)}
	}
	out := make([]ipv4.Message, 0, udpBatch)
	for {
		n, err := pc.ReadBatch(in, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		out = out[:0]
		for i := 0; i < n; i++ {
			m := &in[i]
			from, ok := m.Addr.(*net.UDPAddr)
			if !ok {
				continue
			}
			raw := m.Buffers[0][:m.N]
			if resp := s.answerUDP(raw, from.AddrPort().Addr().Unmap()); resp != nil {
				out = append(out, ipv4.Message{Buffers: [][]byte{resp}, Addr: m.Addr})
			}
		}
		for len(out) > 0 {
			sent, err := pc.WriteBatch(out, 0)
			if err != nil {
				break // a failed send to one client must not stall the others: drop the batch rest
			}
			out = out[sent:]
		}
	}
}

// answerUDP applies response-rate limiting, then answers.
func (s *Server) answerUDP(raw []byte, src netip.Addr) []byte {
	st := s.state.Load()
	if st.rrl != nil {
		switch st.rrl.allow(src) {
		case rrlDrop:
			s.metrics.rateLimited.WithLabelValues("drop").Inc()
			return nil
		case rrlSlip:
			s.metrics.rateLimited.WithLabelValues("slip").Inc()
			if len(raw) < 12 || raw[2]&0x80 != 0 {
				return nil
			}
			out := headerOnly(raw, 0)
			out[2] |= 0x02 // TC: come back over TCP, which spoofed sources cannot do
			return out
		}
	}
	return s.Respond(raw, src, false)
}
