package quicsteer

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"testing"
	"time"
)

// loadOrSkip loads the program, skipping where the kernel or the user cannot.
func loadOrSkip(t *testing.T) *Group {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading an SK_REUSEPORT program needs root (or CAP_BPF)")
	}
	g, err := Load()
	if err != nil {
		t.Skipf("this kernel refuses the SK_REUSEPORT program: %v", err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// bindFree binds a steerable socket on the first free port of 47150..47199.
func bindFree(t *testing.T) *net.UDPConn {
	t.Helper()
	for port := 47150; port < 47200; port++ {
		a := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}
		probe, err := net.ListenUDP("udp", a) // free, and not someone's reuseport group
		if err != nil {
			continue
		}
		probe.Close()
		if c, err := Bind(a); err == nil {
			t.Cleanup(func() { c.Close() })
			return c
		}
	}
	t.Skip("no free UDP port in 47150..47199")
	return nil
}

func short(cid []byte) []byte { return append([]byte{0x40}, append(cid, "payload"...)...) }

func long(cid []byte) []byte {
	b := append([]byte{0xc0, 0, 0, 0, 1, byte(len(cid))}, cid...)
	return append(b, 0, 'p', 'a', 'y')
}

func mustCID(t *testing.T, gen uint8) []byte {
	t.Helper()
	c, err := CID(gen, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSteer: each datagram reaches the socket of the generation its connection ID names (short
// and long headers), and everything else (a client's random Initial DCID, an unknown generation,
// a datagram too short to hold an ID) the newest generation's; once a generation's socket
// closes, its slot is free again.
func TestSteer(t *testing.T) {
	g := loadOrSkip(t)
	a := bindFree(t)
	b, err := Bind(a.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatalf("second socket of the group: %v", err)
	}
	defer b.Close()
	if err := g.Attach(a); err != nil {
		t.Fatal(err)
	}
	for gen, c := range map[uint8]*net.UDPConn{7: a, 8: b} {
		if err := g.Add(gen, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.SetNewest(8); err != nil {
		t.Fatal(err)
	}
	client, err := net.DialUDP("udp", nil, a.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	random := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	notOurs := mustCID(t, 7)
	notOurs[len(notOurs)-1] ^= 0xff // right length, wrong tag
	for i, tc := range []struct {
		name string
		pkt  []byte
		want *net.UDPConn
	}{
		{"short header, generation 7", short(mustCID(t, 7)), a},
		{"short header, generation 8", short(mustCID(t, 8)), b},
		{"long header, generation 7", long(mustCID(t, 7)), a},
		{"long header, random client DCID", long(random), b},
		{"long header, 12-byte DCID without the tag", long(notOurs), b},
		{"short header, generation without a socket", short(mustCID(t, 9)), b},
		{"one byte", []byte{0x40}, b},
	} {
		pkt := append(tc.pkt, fmt.Sprint(i)...) // tell the cases apart
		if _, err := client.Write(pkt); err != nil {
			t.Fatal(err)
		}
		got := recvOn(t, pkt, a, b)
		if got != tc.want {
			t.Errorf("%s: went to the socket of generation %d; want %d", tc.name, genOf(got, a), genOf(tc.want, a))
		}
	}
	if !g.Superseded(7) || g.Superseded(8) {
		t.Errorf("Superseded(7), Superseded(8) = %v, %v; want true, false", g.Superseded(7), g.Superseded(8))
	}
	if n, err := g.Next(); err != nil || n != 9 {
		t.Errorf("Next = %d, %v; want 9", n, err)
	}
	b.Close() // the newest generation is gone: the kernel's hash picks among the rest
	if g.Superseded(7) {
		t.Error("Superseded(7) with generation 8's socket closed; want false (it serves alone again)")
	}
	pkt := short(mustCID(t, 8))
	client.Write(pkt)
	if got := recvOn(t, pkt, a); got != a {
		t.Error("with the newest socket closed, a datagram did not reach the remaining one")
	}
	if n, err := g.Next(); err != nil || n != 9 {
		t.Errorf("Next after close = %d, %v; want 9", n, err)
	}
}

// recvOn returns which of conns received pkt.
func recvOn(t *testing.T, pkt []byte, conns ...*net.UDPConn) *net.UDPConn {
	t.Helper()
	got := make(chan *net.UDPConn, len(conns))
	for _, c := range conns {
		go func() {
			buf := make([]byte, 1500)
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			n, err := c.Read(buf)
			c.SetReadDeadline(time.Time{})
			if err == nil && bytes.Equal(buf[:n], pkt) {
				got <- c
				return
			}
			got <- nil
		}()
	}
	var which *net.UDPConn
	for range conns {
		if c := <-got; c != nil {
			which = c
		}
	}
	if which == nil {
		t.Fatalf("no socket received %q", pkt)
	}
	return which
}

func genOf(c, a *net.UDPConn) int {
	if c == a {
		return 7
	}
	return 8
}

// TestCID: a connection ID names its generation, carries the tag, starts with QUIC-LB's
// unroutable config rotation (so that the L4 balancer reads no server ID), and is random
// elsewhere; a client's random ID is not one of ours.
func TestCID(t *testing.T) {
	seen := map[string]bool{}
	for _, gen := range []uint8{0, 1, 200, 255} {
		c := mustCID(t, gen)
		if len(c) != CIDLen || c[0]>>5 != 0b111 {
			t.Errorf("CID(%d) = %x: want %d bytes starting with the bits 111", gen, c, CIDLen)
		}
		if g, ok := generation(c); !ok || g != gen {
			t.Errorf("generation(CID(%d)) = %d, %v", gen, g, ok)
		}
		if seen[string(c)] {
			t.Errorf("CID(%d) repeated %x", gen, c)
		}
		seen[string(c)] = true
	}
	if _, ok := generation([]byte{1, 2, 3, 4, 5, 6, 7, 8}); ok {
		t.Error("an 8-byte client ID taken for ours")
	}
	prefix := []byte{0x20, 0x01, 0x02} // QUIC-LB: config 1, server ID 0x0102
	c, err := CID(5, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := generation(c); !bytes.Equal(c[:3], prefix) || !ok || g != 5 {
		t.Errorf("CID(5, %x) = %x: want the prefix kept and generation 5", prefix, c)
	}
}
