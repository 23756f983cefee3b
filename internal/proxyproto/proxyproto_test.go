package proxyproto

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// accept runs Accept on the server side of a pipe the client writes head and "rest" to.
func accept(t *testing.T, head []byte) (*Conn, string, error) {
	t.Helper()
	srv, cli := net.Pipe()
	defer srv.Close()
	go func() { cli.Write(append(head, "rest"...)); cli.Close() }()
	c, err := Accept(srv, time.Second)
	if err != nil {
		return nil, "", err
	}
	b, _ := io.ReadAll(c)
	return c, string(b), nil
}

func v2(cmd, fam byte, addrs []byte) []byte {
	h := append([]byte{}, v2sig...)
	h = append(h, 0x20|cmd, fam, 0, 0)
	binary.BigEndian.PutUint16(h[14:], uint16(len(addrs)))
	return append(h, addrs...)
}

// Every header shape HAProxy sends gives the client's address and leaves the bytes after it;
// anything else is refused, naming the problem.
func TestHeaders(t *testing.T) {
	v6 := make([]byte, 36)
	copy(v6, net.ParseIP("2001:db8::1"))
	copy(v6[16:], net.ParseIP("2001:db8::2"))
	binary.BigEndian.PutUint16(v6[32:], 4000)
	binary.BigEndian.PutUint16(v6[34:], 443)
	for _, c := range []struct {
		name   string
		head   []byte
		remote string
	}{
		{"v1 tcp4", []byte("PROXY TCP4 203.0.113.9 192.0.2.1 5555 80\r\n"), "203.0.113.9:5555"},
		{"v1 tcp6", []byte("PROXY TCP6 2001:db8::1 2001:db8::2 4000 443\r\n"), "[2001:db8::1]:4000"},
		{"v1 unknown", []byte("PROXY UNKNOWN\r\n"), "pipe"},
		{"v2 tcp4", v2(1, 0x11, []byte{203, 0, 113, 9, 192, 0, 2, 1, 0x15, 0xb3, 0, 80}), "203.0.113.9:5555"},
		{"v2 tcp6", v2(1, 0x21, v6), "[2001:db8::1]:4000"},
		{"v2 local", v2(0, 0, nil), "pipe"},
	} {
		conn, rest, err := accept(t, c.head)
		if err != nil || conn.RemoteAddr().String() != c.remote || rest != "rest" {
			t.Errorf("%s: %v, remote %v, rest %q; want %s and rest", c.name, err, conn, rest, c.remote)
		}
	}
	for _, c := range []struct{ name, head, want string }{
		{"no header", "GET / HTTP/1.1\r\n\r\n", "none"},
		{"bad v1", "PROXY TCP4 1.2.3 4.5.6.7 1 2\r\n", "malformed"},
		{"v1 family mismatch", "PROXY TCP4 2001:db8::1 2001:db8::2 1 2\r\n", "malformed"},
		{"v1 too long", "PROXY TCP4 " + strings.Repeat("9", 120) + "\r\n", "malformed"},
	} {
		if _, _, err := accept(t, []byte(c.head)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to say %q", c.name, err, c.want)
		}
	}
	big := v2(1, 0x11, make([]byte, 2000))
	if _, _, err := accept(t, big); err == nil || !strings.Contains(err.Error(), "over 1024") {
		t.Errorf("oversized v2: %v", err)
	}
}
