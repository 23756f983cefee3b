package topo

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd  uint32
	data uint32
}

// ifreqData is struct ifreq with ifr_data.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// setOffload turns a legacy ethtool offload flag (ETHTOOL_STXCSUM, ETHTOOL_SGRO...) on or off,
// like `ethtool -K IF tx off`. The caller's thread must be in the interface's namespace.
func setOffload(ifname string, cmd uint32, on bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open ethtool socket: %w", err)
	}
	defer unix.Close(fd)
	v := ethtoolValue{cmd: cmd}
	if on {
		v.data = 1
	}
	var ifr ifreqData
	copy(ifr.name[:unix.IFNAMSIZ-1], ifname)
	ifr.data = unsafe.Pointer(&v)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); errno != 0 {
		return fmt.Errorf("ethtool cmd %#x on %s: %w", cmd, ifname, errno)
	}
	return nil
}

// plainOffloads turns off transmit checksum offload (and with it TSO) and GRO on an interface.
//
// Why: a locally generated TCP segment over veth carries a partial checksum (CHECKSUM_PARTIAL)
// that the receiving stack would complete; once the XDP forwarder has wrapped it in IPIP, the
// backend sees the inner segment with a bad checksum. And GRO on a veth with an XDP program
// merges segments into frames larger than the MTU, which the forwarder answers with ICMP
// too-big. The lab wants every frame on the wire to be a real, full-checksummed packet.
func plainOffloads(ifname string) error {
	if err := setOffload(ifname, unix.ETHTOOL_STXCSUM, false); err != nil {
		return err
	}
	return setOffload(ifname, unix.ETHTOOL_SGRO, false)
}
