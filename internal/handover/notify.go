package handover

import (
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// notify sends a state line to systemd's notification socket (Type=notify units); without
// NOTIFY_SOCKET it does nothing. MAINPID from a successor needs NotifyAccess=all.
func notify(state string) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return
	}
	if strings.HasPrefix(path, "@") {
		path = "\x00" + path[1:] // abstract namespace
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	c.Write([]byte(state))
}

// activated returns the sockets systemd passed by socket activation (LISTEN_FDS), when they are
// meant for this process, and clears the variables so that no child takes them for its own.
func activated() []*os.File {
	defer func() {
		for _, k := range []string{"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"} {
			os.Unsetenv(k)
		}
	}()
	if pid, err := strconv.Atoi(os.Getenv("LISTEN_PID")); err != nil || pid != os.Getpid() {
		return nil
	}
	n, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	if err != nil || n <= 0 {
		return nil
	}
	fs := make([]*os.File, 0, n)
	for fd := 3; fd < 3+n; fd++ {
		unix.CloseOnExec(fd)
		fs = append(fs, os.NewFile(uintptr(fd), "systemd"))
	}
	return fs
}

// takeActivated returns the systemd sockets of the network type bound to address ("tcp" takes
// one stream socket, "udp" every datagram socket of a group), removing them from the pool.
func (s *Sockets) takeActivated(network, address string) []*os.File {
	s.mu.Lock()
	defer s.mu.Unlock()
	want, ok := wantAddr(network, address)
	if !ok {
		return nil
	}
	var out, rest []*os.File
	for _, f := range s.activated {
		if (len(out) == 0 || !strings.HasPrefix(network, "tcp")) && boundTo(f, want) {
			out = append(out, f)
			continue
		}
		rest = append(rest, f)
	}
	s.activated = rest
	return out
}

type sockAddr struct {
	sotype int
	ip     net.IP // nil: any address
	port   int
}

func wantAddr(network, address string) (sockAddr, bool) {
	if strings.HasPrefix(network, "udp") {
		a, err := net.ResolveUDPAddr(network, address)
		if err != nil || a.Port == 0 {
			return sockAddr{}, false
		}
		return sockAddr{unix.SOCK_DGRAM, a.IP, a.Port}, true
	}
	a, err := net.ResolveTCPAddr(network, address)
	if err != nil || a.Port == 0 {
		return sockAddr{}, false
	}
	return sockAddr{unix.SOCK_STREAM, a.IP, a.Port}, true
}

// boundTo reports whether f is a socket of want's type bound to want's address.
func boundTo(f *os.File, want sockAddr) bool {
	fd := rawFD(f)
	if t, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE); err != nil || t != want.sotype {
		return false
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return false
	}
	var ip net.IP
	var port int
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		ip, port = net.IP(a.Addr[:]), a.Port
	case *unix.SockaddrInet6:
		ip, port = net.IP(a.Addr[:]), a.Port
	default:
		return false
	}
	if port != want.port {
		return false
	}
	if want.ip == nil || want.ip.IsUnspecified() {
		return ip.IsUnspecified()
	}
	return ip.Equal(want.ip)
}
