// Package udpio moves the DNS server's UDP datagrams: SO_REUSEPORT sockets bound beside the TCP
// listener, one worker per socket moving batches with raw recvmmsg/sendmmsg, the wait modes and
// CPU steering measured as levers (docs/dns.md, "UDP levers"), and the batch-fill metrics. It
// knows nothing of DNS messages: the server hands it a function that answers one datagram, so the
// system-call tuning lives apart from the message path.
package udpio

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

// Workers is how many UDP sockets and workers a server runs: one per usable core, at least 2.
func Workers() int { return max(2, runtime.GOMAXPROCS(0)) }

// Bind binds a TCP listener and n UDP sockets with SO_REUSEPORT on its port, so the kernel
// spreads clients over the workers. TCP is bound first: with port 0 the kernel picks a port free
// for TCP, and the UDP sockets then join it; a UDP collision on that port (another program's
// UDP socket) closes everything and retries a few times with a new port.
func Bind(listen string, n int) ([]*net.UDPConn, *net.TCPListener, error) {
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
		conns, err := BindUDP(bound, n)
		if err == nil {
			return conns, tcp, nil
		}
		tcp.Close()
		if ap.Port() != 0 || attempt >= 5 {
			return nil, nil, err
		}
	}
}

// BindUDP binds n UDP sockets with SO_REUSEPORT on ap; on any error none stays open.
func BindUDP(ap netip.AddrPort, n int) ([]*net.UDPConn, error) {
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

// Answer answers one datagram, query from src (address and port): it appends the answer to dst (empty, with room for
// an answer of the worker's answerCap bytes, which then costs no allocation) and returns it, or
// returns nothing to send no answer.
type Answer func(dst, query []byte, src netip.AddrPort) []byte

// Serve answers datagrams from conn in batches (one recvmmsg and one sendmmsg per batch under
// load) until conn is closed, or until a read fails while stopping reports true (a drain: the
// batch before it is sent). Each answer is written into the batch's own storage of answerCap
// bytes per datagram, so a worker moving answers that fit allocates nothing. st counts the
// batches; mode says how the worker waits for datagrams.
func Serve(conn *net.UDPConn, mode Wait, st *BatchStats, answerCap int, answer Answer, stopping func() bool) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return
	}
	lockForWait(mode)
	r := newMmsgRing(udpBatch, answerCap)
	for {
		n, err := r.recvWait(rc, mode)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || stopping() {
				return
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
			if resp := answer(r.outBuf[out][:0], raw, src); len(resp) > 0 {
				r.queue(out, i, resp)
				out++
			}
		}
		if out > 0 {
			r.send(rc, out)
		}
	}
}
