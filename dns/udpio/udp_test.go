package udpio

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

// With port 0, TCP is bound first and the UDP sockets join its port; a UDP socket of another
// program on a fixed port fails the bind with an error naming UDP and leaves no TCP listener.
func TestBindSocketsTCPFirst(t *testing.T) {
	for i := 0; i < 50; i++ {
		conns, tcp, err := Bind("127.0.0.1:0", 2)
		if err != nil {
			t.Fatalf("bind %d: %v", i, err)
		}
		tp := tcp.Addr().(*net.TCPAddr).Port
		for _, c := range conns {
			if up := c.LocalAddr().(*net.UDPAddr).Port; up != tp {
				t.Fatalf("udp port %d, tcp port %d", up, tp)
			}
		}
		for _, c := range conns {
			c.Close()
		}
		tcp.Close()
	}
	// A UDP port the kernel picked may be taken for TCP by someone else: pick one free for TCP.
	var taken *net.UDPConn
	for i := 0; taken == nil; i++ {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(u.LocalAddr().(*net.UDPAddr).AddrPort()))
		if err == nil {
			l.Close()
			taken = u
		} else if i > 20 {
			t.Fatalf("no UDP port free for TCP in 20 tries: %v", err)
		} else {
			u.Close()
		}
	}
	defer taken.Close()
	ap := taken.LocalAddr().(*net.UDPAddr).AddrPort()
	_, _, err := Bind(ap.String(), 2)
	if err == nil || !strings.Contains(err.Error(), "listen udp") {
		t.Fatalf("bind on a taken UDP port: %v, want a listen udp error", err)
	}
	l, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(ap.Addr(), ap.Port())))
	if err != nil {
		t.Fatalf("the failed bind left its TCP listener open: %v", err)
	}
	l.Close()
}
