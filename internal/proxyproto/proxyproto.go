// Package proxyproto reads the PROXY protocol header (HAProxy's, versions 1 and 2) that a load
// balancer in front of a stop sends first on each connection, so the stop sees the client's
// address rather than the balancer's when the hop before it is not direct server return.
package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// v2sig is the version 2 signature; version 1 starts with "PROXY ".
var v2sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// Conn is a connection whose addresses are those its PROXY header gave.
type Conn struct {
	net.Conn
	r             *bufio.Reader
	remote, local net.Addr
}

// Read implements net.Conn, through the buffer the header was read with.
func (c *Conn) Read(p []byte) (int, error) { return c.r.Read(p) }

// RemoteAddr is the client's address from the header (the balancer's for LOCAL and UNKNOWN).
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// LocalAddr is the address the client connected to, from the header.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// Accept reads c's PROXY header within timeout and returns the connection with the addresses
// it gave. A connection without a valid header is an error (the caller closes it): a listener
// that expects the header must never take a peer's own first bytes for one, nor the reverse.
func Accept(c net.Conn, timeout time.Duration) (*Conn, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	r := bufio.NewReaderSize(c, 256)
	pc := &Conn{Conn: c, r: r, remote: c.RemoteAddr(), local: c.LocalAddr()}
	head, err := r.Peek(len(v2sig))
	switch {
	case err != nil:
		return nil, fmt.Errorf("read proxy protocol header from %s: %w", c.RemoteAddr(), err)
	case bytes.Equal(head, v2sig):
		return pc, pc.readV2()
	case bytes.HasPrefix(head, []byte("PROXY ")):
		return pc, pc.readV1()
	}
	return nil, fmt.Errorf("read proxy protocol header from %s: none (the connection starts %q); send one, or take this source out of proxy_protocol.trusted", c.RemoteAddr(), head)
}

// readV1 reads "PROXY TCP4|TCP6|UNKNOWN src dst sport dport\r\n" (at most 107 bytes).
func (pc *Conn) readV1() error {
	line, err := pc.r.ReadSlice('\n')
	if err != nil || len(line) > 107 || !bytes.HasSuffix(line, []byte("\r\n")) {
		return errors.New("read proxy protocol v1 header: malformed line")
	}
	f := strings.Fields(string(line[:len(line)-2]))
	if len(f) >= 2 && f[1] == "UNKNOWN" {
		return nil
	}
	if len(f) != 6 || (f[1] != "TCP4" && f[1] != "TCP6") {
		return fmt.Errorf("read proxy protocol v1 header: malformed %q", line)
	}
	src, err1 := addrPort(f[2], f[4])
	dst, err2 := addrPort(f[3], f[5])
	if err := errors.Join(err1, err2); err != nil || src.Addr().Is4() != (f[1] == "TCP4") {
		return fmt.Errorf("read proxy protocol v1 header: malformed %q", line)
	}
	pc.remote, pc.local = net.TCPAddrFromAddrPort(src), net.TCPAddrFromAddrPort(dst)
	return nil
}

func addrPort(ip, port string) (netip.AddrPort, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(a, uint16(p)), nil
}

// readV2 reads the binary header: signature, version and command, family, length, addresses
// (TLVs after them are skipped).
func (pc *Conn) readV2() error {
	var h [16]byte
	if _, err := io.ReadFull(pc.r, h[:]); err != nil {
		return fmt.Errorf("read proxy protocol v2 header: %w", err)
	}
	if h[12]>>4 != 2 {
		return fmt.Errorf("read proxy protocol v2 header: version %d", h[12]>>4)
	}
	n := int(binary.BigEndian.Uint16(h[14:16]))
	if n > 1024 {
		return fmt.Errorf("read proxy protocol v2 header: %d bytes of addresses and TLVs, over 1024", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(pc.r, body); err != nil {
		return fmt.Errorf("read proxy protocol v2 header: %w", err)
	}
	if h[12]&0x0f == 0 { // LOCAL: the balancer's own connection (a health check)
		return nil
	}
	switch h[13] >> 4 {
	case 1: // IPv4
		if n < 12 {
			return errors.New("read proxy protocol v2 header: short IPv4 addresses")
		}
		src := netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[0:4])), binary.BigEndian.Uint16(body[8:10]))
		dst := netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[4:8])), binary.BigEndian.Uint16(body[10:12]))
		pc.remote, pc.local = net.TCPAddrFromAddrPort(src), net.TCPAddrFromAddrPort(dst)
	case 2: // IPv6
		if n < 36 {
			return errors.New("read proxy protocol v2 header: short IPv6 addresses")
		}
		src := netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[0:16])), binary.BigEndian.Uint16(body[32:34]))
		dst := netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[16:32])), binary.BigEndian.Uint16(body[34:36]))
		pc.remote, pc.local = net.TCPAddrFromAddrPort(src), net.TCPAddrFromAddrPort(dst)
	}
	return nil
}
