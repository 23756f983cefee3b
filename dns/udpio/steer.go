package udpio

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// udpSteerEnv names the environment variable that, set to "cpu", steers each datagram to the
// SO_REUSEPORT socket of the CPU it arrived on (SO_ATTACH_REUSEPORT_CBPF) instead of the kernel's
// hash of the flow. A measured lever; docs/dns.md ("UDP levers") has the result.
const udpSteerEnv = "SWITCHYARD_DNS_UDP_STEER"

// steerByCPU attaches a classic BPF program to the reuseport group of conns that returns the
// receiving CPU modulo the group size: socket i gets the datagrams that arrive on CPU i.
func steerByCPU(conns []*net.UDPConn) error {
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: uint32(0xfffff000 + 36)}, // SKF_AD_OFF + SKF_AD_CPU
		{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(len(conns))},
		{Code: unix.BPF_RET | unix.BPF_A},
	}
	rc, err := conns[0].SyscallConn()
	if err != nil {
		return fmt.Errorf("steer udp by cpu: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
			&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
	}); err != nil {
		return fmt.Errorf("steer udp by cpu: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("steer udp by cpu: attach SO_ATTACH_REUSEPORT_CBPF: %w", serr)
	}
	return nil
}

// SteerFromEnv applies the steering SWITCHYARD_DNS_UDP_STEER asks for to the reuseport group
// conns: none for "" or "hash", steerByCPU for "cpu"; other values are an error.
func SteerFromEnv(conns []*net.UDPConn) error {
	switch v := os.Getenv(udpSteerEnv); v {
	case "", "hash":
		return nil
	case "cpu":
		return steerByCPU(conns)
	default:
		return fmt.Errorf("%s=%q: unknown; use hash (the default) or cpu", udpSteerEnv, v)
	}
}
