package dns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// udpBatch is how many datagrams one recvmmsg/sendmmsg call moves: under load a worker answers
// a batch per pair of system calls instead of a pair per query.
const udpBatch = 32

// udpSocketBuffer is the receive and send buffer asked for each UDP socket.
const udpSocketBuffer = 4 << 20

// udpWorkers is how many UDP sockets and workers a server runs: one per usable core, at least 2.
func udpWorkers() int { return max(2, runtime.GOMAXPROCS(0)) }

// bindSockets binds a TCP listener and n UDP sockets with SO_REUSEPORT on its port, so the kernel
// spreads clients over the workers. TCP is bound first: with port 0 the kernel picks a port free
// for TCP, and the UDP sockets then join it; a UDP collision on that port (another program's
// UDP socket) closes everything and retries a few times with a new port.
func bindSockets(listen string, n int) ([]*net.UDPConn, *net.TCPListener, error) {
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return nil, nil, fmt.Errorf("parse listen address %q: write it as address:port, e.g. 127.0.0.1:5353: %w", listen, err)
	}
	for attempt := 0; ; attempt++ {
		// TCP without SO_REUSEPORT: a second server on the same port must fail, not share.
		tcp, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
		if err != nil {
			return nil, nil, fmt.Errorf("listen tcp %s: %w", listen, err)
		}
		bound := tcp.Addr().(*net.TCPAddr).AddrPort()
		conns, err := bindUDP(bound, n)
		if err == nil {
			return conns, tcp, nil
		}
		tcp.Close()
		if ap.Port() != 0 || attempt >= 5 {
			return nil, nil, err
		}
	}
}

// bindUDP binds n UDP sockets with SO_REUSEPORT on ap; on any error none stays open.
func bindUDP(ap netip.AddrPort, n int) ([]*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	var conns []*net.UDPConn
	for len(conns) < n {
		c, err := lc.ListenPacket(context.Background(), "udp", ap.String())
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("listen udp %s: %w", ap, err)
		}
		uc := c.(*net.UDPConn)
		// Bursts from large resolvers outrun the default socket buffer (~200 KB); a larger one
		// turns them into latency instead of loss. Best effort: capped by rmem_max.
		uc.SetReadBuffer(udpSocketBuffer)
		uc.SetWriteBuffer(udpSocketBuffer)
		conns = append(conns, uc)
	}
	return conns, nil
}

// serveUDP answers datagrams from one socket in batches (one recvmmsg and one sendmmsg per
// batch under load) until it is closed. A cached answer is written into the batch's own
// storage, so the hot path allocates nothing.
func (s *Server) serveUDP(conn *net.UDPConn, st *batchStats) {
	defer s.wg.Done()
	defer s.udpLive.Add(-1)
	rc, err := conn.SyscallConn()
	if err != nil {
		return
	}
	lockForWait(s.udpWait)
	r := newMmsgRing(udpBatch)
	for {
		n, err := r.recvWait(rc, s.udpWait)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || s.draining.Load() {
				return // closed, or draining (Shutdown): the batch before this one is sent
			}
			continue
		}
		st.calls.Add(1)
		st.datagrams.Add(uint64(n))
		out := 0
		for i := 0; i < n; i++ {
			src, ok := r.source(i)
			if !ok {
				continue
			}
			raw := r.bufs[i][:min(int(r.in[i].Len), len(r.bufs[i]))]
			if resp := s.answerUDP(r.outBuf[out][:0], raw, src); len(resp) > 0 {
				r.queue(out, i, resp)
				out++
			}
		}
		if out > 0 {
			r.send(rc, out)
		}
	}
}

// answerUDP applies response-rate limiting, then answers.
func (s *Server) answerUDP(dst, raw []byte, src netip.Addr) []byte {
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
	return s.respondTo(dst, raw, src, false)
}
