package udpio

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsgRing is one worker's batch of datagrams for recvmmsg and sendmmsg, built once: the
// headers, the I/O vectors, the source addresses (which the answers reuse as their destination)
// and the buffers. Moving a batch allocates nothing, unlike x/net's ReadBatch, which builds a
// net.UDPAddr per datagram.
type mmsgRing struct {
	in    []unix.Mmsghdr
	inIov []unix.Iovec
	names []unix.RawSockaddrInet6 // large enough for either family
	bufs  [][]byte

	out    []unix.Mmsghdr
	outIov []unix.Iovec
	outBuf [][]byte // per-slot storage for cached answers
	keep   [][]byte // the answers being sent, kept reachable while the kernel reads them
}

// udpRecvBuf is the largest datagram a worker reads: any UDP payload, so a query is never cut.
const udpRecvBuf = 65535

// newMmsgRing builds a ring of n slots whose answer storage holds answerCap bytes per slot.
func newMmsgRing(n, answerCap int) *mmsgRing {
	r := &mmsgRing{in: make([]unix.Mmsghdr, n), inIov: make([]unix.Iovec, n),
		names: make([]unix.RawSockaddrInet6, n), bufs: make([][]byte, n),
		out: make([]unix.Mmsghdr, n), outIov: make([]unix.Iovec, n),
		outBuf: make([][]byte, n), keep: make([][]byte, n)}
	for i := 0; i < n; i++ {
		r.bufs[i] = make([]byte, udpRecvBuf)
		r.outBuf[i] = make([]byte, 0, answerCap)
	}
	return r
}

// resetIn prepares every receive slot for the next recvmmsg.
func (r *mmsgRing) resetIn() {
	for i := range r.in {
		r.inIov[i].Base = &r.bufs[i][0]
		r.inIov[i].SetLen(len(r.bufs[i]))
		h := &r.in[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = &r.inIov[i]
		h.SetIovlen(1)
		h.Control, h.Controllen, h.Flags = nil, 0, 0
		r.in[i].Len = 0
	}
}

// source returns the client address and port of received slot i.
func (r *mmsgRing) source(i int) (netip.AddrPort, bool) {
	sa := &r.names[i]
	// The port is in network byte order in both sockaddrs.
	port := func(p uint16) uint16 { b := (*[2]byte)(unsafe.Pointer(&p)); return uint16(b[0])<<8 | uint16(b[1]) }
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port(sa4.Port)), true
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port(sa.Port)), true
	}
	return netip.AddrPort{}, false
}

// queue adds answer b for received slot i to the send batch at position j.
func (r *mmsgRing) queue(j, i int, b []byte) {
	r.keep[j] = b
	r.outIov[j].Base = &b[0]
	r.outIov[j].SetLen(len(b))
	h := &r.out[j].Hdr
	h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
	h.Namelen = r.in[i].Hdr.Namelen
	h.Iov = &r.outIov[j]
	h.SetIovlen(1)
	h.Control, h.Controllen, h.Flags = nil, 0, 0
}

// recv reads up to len(r.in) datagrams, waiting in the netpoller while none is queued.
func (r *mmsgRing) recv(rc syscall.RawConn) (int, error) {
	r.resetIn()
	var n int
	var errno syscall.Errno
	err := rc.Read(func(fd uintptr) bool {
		m, e := r.recvmmsg(fd)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		n, errno = m, e
		return true
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	return n, nil
}

// rawSyscall6 makes the workers' recvmmsg and sendmmsg calls. The sockets are non-blocking, so
// neither call ever sleeps, and a raw system call skips the runtime's bookkeeping for one that
// might: entering a regular one wakes sysmon when it sleeps, and one that runs past 20 us (a
// sendmmsg of a batch on loopback delivers to the receivers and wakes them inside the call, and
// signed answers make it longer) lets sysmon hand the worker's P to another thread, a context
// switch and a wake-up for CPU work the worker was doing anyway.
func rawSyscall6(trap, a1, a2, a3, a4, a5, a6 uintptr) (uintptr, uintptr, syscall.Errno) {
	return unix.RawSyscall6(trap, a1, a2, a3, a4, a5, a6)
}

// send writes the first n queued answers. A datagram the kernel refuses (a client address it
// cannot reach) is skipped so it cannot stall the rest of the batch.
func (r *mmsgRing) send(rc syscall.RawConn, n int) {
	off := 0
	for off < n {
		var sent int
		var errno syscall.Errno
		err := rc.Write(func(fd uintptr) bool {
			m, _, e := rawSyscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&r.out[off])),
				uintptr(n-off), 0, 0, 0)
			if e == unix.EAGAIN || e == unix.EINTR {
				return false
			}
			sent, errno = int(m), e
			return true
		})
		if err != nil {
			break // closed
		}
		if errno != 0 || sent <= 0 {
			sent = 1 // sendmmsg fails only on its first datagram: drop that one
		}
		off += sent
	}
	for j := 0; j < n; j++ {
		r.keep[j] = nil
	}
}
