package proxyproto

import (
	"encoding/binary"
	"net"
	"net/netip"
	"strconv"
)

// Header is the PROXY header (version 1 or 2) a stop sends first on a connection to a backend
// that wants one: the client's address src and the address it connected to, dst. Without a
// usable pair (nil, not TCP, or mixed families) it is version 1's UNKNOWN or version 2's LOCAL
// (the receiver then uses the connection's own addresses): what health checks send.
func Header(version int, src, dst net.Addr) []byte {
	s, sok := tcpAddr(src)
	d, dok := tcpAddr(dst)
	ok := sok && dok && s.Addr().Is4() == d.Addr().Is4()
	if version == 1 {
		if !ok {
			return []byte("PROXY UNKNOWN\r\n")
		}
		fam := "TCP4"
		if !s.Addr().Is4() {
			fam = "TCP6"
		}
		b := append([]byte("PROXY "), fam...)
		b = append(append(append(b, ' '), s.Addr().String()...), ' ')
		b = append(append(b, d.Addr().String()...), ' ')
		b = append(strconv.AppendUint(b, uint64(s.Port()), 10), ' ')
		return append(strconv.AppendUint(b, uint64(d.Port()), 10), "\r\n"...)
	}
	b := append([]byte(nil), v2sig...)
	if !ok {
		return append(b, 0x20, 0x00, 0, 0) // LOCAL, unspecified family, no addresses
	}
	if s.Addr().Is4() {
		b = append(b, 0x21, 0x11, 0, 12)
		a, c := s.Addr().As4(), d.Addr().As4()
		b = append(append(b, a[:]...), c[:]...)
	} else {
		b = append(b, 0x21, 0x21, 0, 36)
		a, c := s.Addr().As16(), d.Addr().As16()
		b = append(append(b, a[:]...), c[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, s.Port())
	return binary.BigEndian.AppendUint16(b, d.Port())
}

// tcpAddr reads a TCP address (an IPv4-mapped one as IPv4).
func tcpAddr(a net.Addr) (netip.AddrPort, bool) {
	t, ok := a.(*net.TCPAddr)
	if !ok || t == nil {
		return netip.AddrPort{}, false
	}
	ap := t.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), ap.IsValid()
}
