package h3

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// serve starts an HTTP/3 server answering "ok" on a loopback UDP port.
func serve(t *testing.T, o Options) *Server {
	t.Helper()
	cp, kp, _ := testutil.WriteCert(t, t.TempDir(), "h3.test")
	tc, err := tlsconf.Load(&tlsconf.Config{Certificates: []tlsconf.Certificate{{Cert: cp, Key: kp}}})
	if err != nil {
		t.Fatal(err)
	}
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Serve(&UDP{Conns: []net.PacketConn{uc}}, tc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

var clientTLS = &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}} //nolint:gosec // test certificate

// A packet of a QUIC version the server does not speak gets a Version Negotiation packet
// listing QUIC v1 (RFC 9000 6), not a connection.
func TestVersionNegotiation(t *testing.T) {
	s := serve(t, Options{})
	c, err := net.DialUDP("udp", nil, s.Addr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pkt := make([]byte, 1200)
	pkt[0] = 0xc0
	binary.BigEndian.PutUint32(pkt[1:], 0x1a2a3a4a) // a reserved version (RFC 9000 15)
	pkt[5], pkt[14] = 8, 8                          // 8-byte destination and source connection ids
	c.Write(pkt)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	buf := make([]byte, 1500)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no answer to an unknown version: %v", err)
	}
	if buf[0]&0x80 == 0 || binary.BigEndian.Uint32(buf[1:]) != 0 {
		t.Fatalf("answer %x is not a Version Negotiation packet", buf[:n])
	}
	found := false
	for off := 7 + int(buf[5]) + int(buf[6+int(buf[5])]); off+4 <= n; off += 4 {
		found = found || binary.BigEndian.Uint32(buf[off:]) == 1
	}
	if !found {
		t.Fatalf("Version Negotiation %x does not list QUIC v1", buf[:n])
	}
}

// oneWay is a client socket that sends only its first datagram (a client whose address was
// spoofed: the server's answers never reach it) and counts the bytes the server sends back.
type oneWay struct {
	net.PacketConn
	sent     atomic.Int64
	received atomic.Int64
	once     sync.Once
}

func (c *oneWay) WriteTo(p []byte, addr net.Addr) (int, error) {
	first := false
	c.once.Do(func() { first = true })
	if !first {
		return len(p), nil
	}
	c.sent.Add(int64(len(p)))
	return c.PacketConn.WriteTo(p, addr)
}

func (c *oneWay) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	c.received.Add(int64(n))
	return n, addr, err
}

// An unvalidated client address gets at most three times the bytes it sent (RFC 9000 8.1):
// a spoofed Initial cannot make the server an amplifier.
func TestAmplificationLimit(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true") // the wrapped client socket
	s := serve(t, Options{})
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c := &oneWay{PacketConn: uc}
	tr := &quic.Transport{Conn: c}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := tr.Dial(ctx, s.Addr(), clientTLS, &quic.Config{}); err == nil {
		t.Fatal("a handshake finished with one datagram sent")
	}
	if sent, got := c.sent.Load(), c.received.Load(); sent == 0 || got == 0 || got > 3*sent {
		t.Fatalf("the server sent %d bytes for the client's %d; want an answer, at most three times as many", got, sent)
	}
}

// retrySeen is a client socket that notes a Retry packet from the server.
type retrySeen struct {
	net.PacketConn
	retries atomic.Int32
}

func (c *retrySeen) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	if n > 5 && p[0]&0xf0 == 0xf0 && binary.BigEndian.Uint32(p[1:]) == 1 { // long header, v1, type Retry
		c.retries.Add(1)
	}
	return n, addr, err
}

// Under load (here: always) a new client must prove its address with a Retry first, and a real
// client then completes its request; 0-RTT is refused, so no request can be replayed.
func TestRetryUnderLoadAndNo0RTT(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true") // the wrapped client socket
	s := serve(t, Options{ValidateAbove: -1})
	uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c := &retrySeen{PacketConn: uc}
	tr := &quic.Transport{Conn: c}
	defer tr.Close()
	cache := tls.NewLRUClientSessionCache(4)
	tc := clientTLS.Clone()
	tc.ClientSessionCache = cache
	tc.ServerName = "h3.test" // the session cache is keyed by it
	rt := &http3.Transport{TLSClientConfig: tc, Dial: func(ctx context.Context, _ string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
		return tr.DialEarly(ctx, s.Addr(), tlsCfg, cfg)
	}}
	defer rt.Close()
	resp, err := (&http.Client{Transport: rt, Timeout: 5 * time.Second}).Get("https://h3.test/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" || c.retries.Load() == 0 {
		t.Fatalf("answer %q after %d Retry packets; want ok after a Retry", body, c.retries.Load())
	}
	// A second connection with the session ticket offers 0-RTT; the server must not take it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	conn, err := tr.DialEarly(ctx, s.Addr(), tc, &quic.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	select {
	case <-conn.HandshakeComplete():
	case <-ctx.Done():
		t.Fatal("the second handshake did not finish")
	}
	if st := conn.ConnectionState(); st.Used0RTT || !st.TLS.DidResume {
		t.Fatalf("second connection: resumed %v, 0-RTT used %v; want resumed without 0-RTT", st.TLS.DidResume, st.Used0RTT)
	}
}
