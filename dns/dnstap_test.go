package dns

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dt "github.com/dnstap/golang-dnstap"
	framestream "github.com/farsightsec/golang-framestream"
	mdns "github.com/miekg/dns"
	"google.golang.org/protobuf/proto"

	"github.com/switchyard/switchyard/internal/testutil"
)

// tapReader is a dnstap reader on a Unix socket: the Frame Streams bidirectional handshake of
// golang-framestream, each frame kept in order.
type tapReader struct {
	ln     net.Listener
	mu     sync.Mutex
	frames [][]byte
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newTapReader(t *testing.T, path string) *tapReader {
	t.Helper()
	os.Remove(path)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	r := &tapReader{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				fr, err := framestream.NewReader(c, &framestream.ReaderOptions{
					ContentTypes: [][]byte{dt.FSContentType}, Bidirectional: true})
				if err != nil {
					return
				}
				buf := make([]byte, 1<<16)
				for {
					n, err := fr.ReadFrame(buf)
					if err != nil {
						return
					}
					r.mu.Lock()
					r.frames = append(r.frames, append([]byte(nil), buf[:n]...))
					r.mu.Unlock()
				}
			}()
		}
	}()
	t.Cleanup(r.close)
	return r
}

// close stops the reader as a crashed collector would: the listener and every connection go.
func (r *tapReader) close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *tapReader) messages(t *testing.T) []*dt.Dnstap {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*dt.Dnstap
	for _, f := range r.frames {
		m := new(dt.Dnstap)
		if err := proto.Unmarshal(f, m); err != nil {
			t.Fatalf("frame is not a dnstap message: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// writeFile writes the frames as a Frame Streams file, the format dnstap-read reads.
func (r *tapReader) writeFile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := dt.NewWriter(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	for _, fr := range r.frames {
		if _, err := w.WriteFrame(fr); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.Unlock()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// tapSocket is a short socket path (sun_path holds 108 bytes; t.TempDir's can be longer).
func tapSocket(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sytap")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "tap.sock")
}

// wireExchange sends q over conn (UDP or TCP framing by network) and returns the answer's bytes.
func wireExchange(t *testing.T, network, addr string, q *mdns.Msg) (raw []byte, local *net.UDPAddr, tcpLocal *net.TCPAddr) {
	t.Helper()
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	dc := &mdns.Conn{Conn: c}
	if err := dc.WriteMsg(q); err != nil {
		t.Fatal(err)
	}
	raw, err = dc.ReadMsgHeader(nil)
	if err != nil {
		t.Fatalf("%s exchange: %v", network, err)
	}
	if u, ok := c.LocalAddr().(*net.UDPAddr); ok {
		return raw, u, nil
	}
	return raw, nil, c.LocalAddr().(*net.TCPAddr)
}

// The server's dnstap messages, read by a Frame Streams reader: AUTH_QUERY and AUTH_RESPONSE
// for a UDP and a TCP query, with the client's and the server's addresses and ports, the times
// and the wire messages as sent; then BIND's dnstap-read reads the same frames from a file.
func TestDnstapToReader(t *testing.T) {
	sock := tapSocket(t)
	rd := newTapReader(t, sock)
	srv := startServer(t, testConfig(t)+"dnstap: {socket: "+sock+", identity: sy-test, version: v-test}\n", Options{})
	addr := srv.Addr().String()
	q1 := new(mdns.Msg)
	q1.SetQuestion("www.example.com.", mdns.TypeA)
	q1.Id = 4242
	before := time.Now()
	ans1, ul, _ := wireExchange(t, "udp", addr, q1)
	q2 := new(mdns.Msg)
	q2.SetQuestion("app.example.com.", mdns.TypeA)
	q2.SetEdns0(1232, false)
	ans2, _, tl := wireExchange(t, "tcp", addr, q2)
	testutil.Eventually(t, 5*time.Second, func() bool { return len(rd.messages(t)) >= 4 }, "4 dnstap messages")
	ms := rd.messages(t)
	if len(ms) != 4 {
		t.Fatalf("got %d messages, want 4", len(ms))
	}
	want := []struct {
		typ   dt.Message_Type
		proto dt.SocketProtocol
		port  int
		wire  func(*dt.Message) []byte
		same  []byte
	}{
		{dt.Message_AUTH_QUERY, dt.SocketProtocol_UDP, ul.Port, (*dt.Message).GetQueryMessage, mustPack(t, q1)},
		{dt.Message_AUTH_RESPONSE, dt.SocketProtocol_UDP, ul.Port, (*dt.Message).GetResponseMessage, ans1},
		{dt.Message_AUTH_QUERY, dt.SocketProtocol_TCP, tl.Port, (*dt.Message).GetQueryMessage, mustPack(t, q2)},
		{dt.Message_AUTH_RESPONSE, dt.SocketProtocol_TCP, tl.Port, (*dt.Message).GetResponseMessage, ans2},
	}
	for i, w := range want {
		d := ms[i]
		m := d.GetMessage()
		if string(d.GetIdentity()) != "sy-test" || string(d.GetVersion()) != "v-test" {
			t.Errorf("message %d: identity %q version %q", i, d.GetIdentity(), d.GetVersion())
		}
		if m.GetType() != w.typ || m.GetSocketProtocol() != w.proto || m.GetSocketFamily() != dt.SocketFamily_INET {
			t.Errorf("message %d: %v %v %v, want %v %v INET", i, m.GetType(), m.GetSocketProtocol(), m.GetSocketFamily(), w.typ, w.proto)
		}
		if net.IP(m.GetQueryAddress()).String() != "127.0.0.1" || int(m.GetQueryPort()) != w.port ||
			net.IP(m.GetResponseAddress()).String() != "127.0.0.1" || int(m.GetResponsePort()) != int(srv.Addr().Port()) {
			t.Errorf("message %d: %v:%d -> %v:%d, want 127.0.0.1:%d -> %s", i, net.IP(m.GetQueryAddress()), m.GetQueryPort(),
				net.IP(m.GetResponseAddress()), m.GetResponsePort(), w.port, srv.Addr())
		}
		if got := w.wire(m); string(got) != string(w.same) {
			t.Errorf("message %d: wire message differs from the one on the wire:\n%x\n%x", i, got, w.same)
		}
		qt := time.Unix(int64(m.GetQueryTimeSec()), int64(m.GetQueryTimeNsec()))
		if qt.Before(before.Add(-time.Second)) || qt.After(time.Now()) {
			t.Errorf("message %d: query time %v is not the test's", i, qt)
		}
		if w.typ == dt.Message_AUTH_RESPONSE && m.GetResponseTimeSec() == 0 {
			t.Errorf("message %d: response without a response time", i)
		}
	}

	path, err := exec.LookPath("dnstap-read")
	if err != nil {
		t.Skip("dnstap-read not installed: apt-get install bind9-dnsutils")
	}
	file := filepath.Join(t.TempDir(), "tap.fstrm")
	rd.writeFile(t, file)
	out, err := exec.Command(path, "-y", file).CombinedOutput()
	if err != nil {
		t.Fatalf("dnstap-read -y: %v\n%s", err, out)
	}
	s := string(out)
	for _, w := range []string{"type: AUTH_QUERY", "type: AUTH_RESPONSE", "identity: sy-test", "version: v-test",
		"socket_protocol: UDP", "socket_protocol: TCP", `query_address: "127.0.0.1"`, "www.example.com", "app.example.com",
		"198.51.100.", "id: 4242"} {
		if !strings.Contains(s, w) {
			t.Errorf("dnstap-read output lacks %q:\n%s", w, s)
		}
	}
	if n := strings.Count(s, "type: MESSAGE"); n != 4 {
		t.Errorf("dnstap-read shows %d messages, want 4:\n%s", n, s)
	}
}

func mustPack(t *testing.T, m *mdns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// No reader: answers go on at full speed, the bounded queue fills and the rest is dropped and
// counted. A reader that appears gets the messages; one that goes away and comes back gets them
// again after the reconnect.
func TestDnstapReaderGoneAndBack(t *testing.T) {
	sock := tapSocket(t)
	srv := startServer(t, testConfig(t)+"dnstap: {socket: "+sock+", queue: 8, responses: false}\n", Options{})
	addr := srv.Addr().String()
	query := func(n int) {
		c, err := net.Dial("udp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := 0; i < n; i++ {
			q := new(mdns.Msg)
			q.SetQuestion("www.example.com.", mdns.TypeA)
			dc := &mdns.Conn{Conn: c}
			c.SetDeadline(time.Now().Add(2 * time.Second))
			if err := dc.WriteMsg(q); err != nil {
				t.Fatal(err)
			}
			if _, err := dc.ReadMsg(); err != nil {
				t.Fatalf("no answer while the dnstap reader is away: %v", err)
			}
		}
	}
	start := time.Now()
	query(50)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("50 answers took %v without a reader", d)
	}
	if got := gatherCounter(t, srv, "switchyard_dns_dnstap_dropped_total"); got < 50-8 {
		t.Errorf("dropped %v messages, want >= 42 (queue 8, 50 queries, no reader)", got)
	}
	rd := newTapReader(t, sock)
	testutil.Eventually(t, 5*time.Second, func() bool { return len(rd.messages(t)) >= 8 }, "the queued messages after the reader came")
	query(5)
	testutil.Eventually(t, 5*time.Second, func() bool { return len(rd.messages(t)) >= 13 }, "new messages")
	for _, m := range rd.messages(t) {
		if m.GetMessage().GetType() != dt.Message_AUTH_QUERY {
			t.Fatalf("responses: false, but got %v", m.GetMessage().GetType())
		}
	}
	rd.close()
	// The writer learns the reader is gone at its next write; the queries meanwhile may be lost.
	query(3)
	time.Sleep(100 * time.Millisecond)
	query(3)
	rd2 := newTapReader(t, sock)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for len(rd2.messages(t)) == 0 && ctx.Err() == nil {
		query(1)
		time.Sleep(200 * time.Millisecond)
	}
	if len(rd2.messages(t)) == 0 {
		t.Fatal("no message reached the second reader: no reconnect")
	}
}
