package udpio

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Wait says how a UDP worker waits when its socket has no datagram queued. The levers
// docs/dns.md ("UDP levers") describes; what each measured is in docs/measurements/dns.md.
type Wait string

const (
	// WaitNetpoll parks the worker goroutine in Go's netpoller (epoll) until the socket is
	// readable: the default.
	WaitNetpoll Wait = "netpoll"
	// WaitThread locks the worker to its OS thread and waits in poll(2) on its one socket, so
	// a wake-up goes straight to the thread that reads, without the netpoller and the scheduler.
	WaitThread Wait = "thread"
	// WaitSpin retries recvmmsg a bounded number of times (udpSpinTries) before parking in the
	// netpoller: brief polling before sleeping.
	WaitSpin Wait = "spin"
)

// udpSpinTries is how many empty recvmmsg calls WaitSpin makes before parking (about 0.5 µs
// each on loopback, so a few tens of µs of polling).
const udpSpinTries = 64

// udpPollTimeoutMs bounds one poll(2) of WaitThread, so a closed socket is noticed within it.
const udpPollTimeoutMs = 50

// udpWaitEnv names the environment variable that picks the UDP wait mode (for A/B measurement).
const udpWaitEnv = "SWITCHYARD_DNS_UDP_WAIT"

// ParseWait checks a wait mode; empty means the environment's (SWITCHYARD_DNS_UDP_WAIT), else
// netpoll.
func ParseWait(w Wait) (Wait, error) {
	if w == "" {
		w = Wait(os.Getenv(udpWaitEnv))
	}
	switch w {
	case "", WaitNetpoll:
		return WaitNetpoll, nil
	case WaitThread, WaitSpin:
		return w, nil
	}
	return "", fmt.Errorf("udp wait mode %q: unknown; use netpoll, thread or spin (Options.UDPWait or %s)", w, udpWaitEnv)
}

// BatchStats counts one worker's non-empty recvmmsg calls and the datagrams they returned, so the
// batch fill (datagrams per call) can be read from the metrics. Each worker owns one, padded to
// its own cache line, so counting costs no shared write.
type BatchStats struct {
	calls, datagrams atomic.Uint64
	_                [48]byte
}

// RegisterBatchStats exposes the workers' batch counters as two counters summed at scrape time
// (switchyard_dns_udp_recv_batches_total and switchyard_dns_udp_recv_datagrams_total).
func RegisterBatchStats(r *prometheus.Registry, stats []BatchStats) error {
	sum := func(f func(*BatchStats) uint64) func() float64 {
		return func() float64 {
			var t uint64
			for i := range stats {
				t += f(&stats[i])
			}
			return float64(t)
		}
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "switchyard_dns_udp_recv_batches_total",
			Help: "recvmmsg calls of the UDP workers that returned at least one datagram."},
			sum(func(b *BatchStats) uint64 { return b.calls.Load() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "switchyard_dns_udp_recv_datagrams_total",
			Help: "Datagrams the UDP workers received; divided by the batches, the batch fill."},
			sum(func(b *BatchStats) uint64 { return b.datagrams.Load() })),
	} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("register dns batch metrics: %w", err)
		}
	}
	return nil
}

// recvmmsg is one non-blocking recvmmsg into the ring, a raw system call (rawSyscall6).
func (r *mmsgRing) recvmmsg(fd uintptr) (int, syscall.Errno) {
	m, _, e := rawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.in[0])),
		uintptr(len(r.in)), 0, 0, 0)
	return int(m), e
}

// recvWait reads up to len(r.in) datagrams, waiting as mode says while none is queued. The
// thread mode expects the caller to have locked its OS thread.
func (r *mmsgRing) recvWait(rc syscall.RawConn, mode Wait) (int, error) {
	if mode == WaitNetpoll {
		return r.recv(rc)
	}
	r.resetIn()
	var n int
	var errno syscall.Errno
	tries := 0
	err := rc.Read(func(fd uintptr) bool {
		for {
			m, e := r.recvmmsg(fd)
			if e != unix.EAGAIN && e != unix.EINTR {
				n, errno = m, e
				return true
			}
			switch mode {
			case WaitSpin:
				if tries++; tries > udpSpinTries {
					tries = 0
					return false // park in the netpoller
				}
			case WaitThread:
				pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				if k, _ := unix.Poll(pfd, udpPollTimeoutMs); k == 0 {
					n, errno = 0, unix.EAGAIN // timed out: let the caller see a close
					return true
				}
			}
		}
	})
	if err != nil {
		return 0, err
	}
	if errno != 0 {
		return 0, errno
	}
	return n, nil
}

// lockForWait locks the calling goroutine to its thread when mode needs it.
func lockForWait(mode Wait) {
	if mode == WaitThread {
		runtime.LockOSThread()
	}
}
