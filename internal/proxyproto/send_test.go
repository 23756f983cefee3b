package proxyproto

import (
	"net"
	"testing"
	"time"
)

// Every header Header makes is read back by Accept with the same addresses (LOCAL and UNKNOWN:
// the connection's own).
func TestHeaderRoundTrip(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	for _, c := range []struct {
		src, dst net.Addr
		want     string // the remote address Accept reports; "" the connection's own
	}{
		{tcp("192.0.2.7:40000"), tcp("198.51.100.1:443"), "192.0.2.7:40000"},
		{tcp("[2001:db8::7]:40000"), tcp("[2001:db8::1]:443"), "[2001:db8::7]:40000"},
		{tcp("[::ffff:192.0.2.7]:1"), tcp("198.51.100.1:2"), "192.0.2.7:1"},
		{nil, tcp("198.51.100.1:443"), ""},
		{tcp("192.0.2.7:1"), tcp("[2001:db8::1]:2"), ""},
	} {
		for _, v := range []int{1, 2} {
			a, b := net.Pipe()
			go func() { b.Write(append(Header(v, c.src, c.dst), "GET"...)); b.Close() }()
			pc, err := Accept(a, time.Second)
			if err != nil {
				t.Fatalf("v%d %v: %v", v, c.src, err)
			}
			want := c.want
			if want == "" {
				want = a.RemoteAddr().String()
			}
			if got := pc.RemoteAddr().String(); got != want {
				t.Errorf("v%d %v: remote %s, want %s", v, c.src, got, want)
			}
			a.Close()
		}
	}
}
