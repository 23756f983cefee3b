package testenv

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/quiclb"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/fwd"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/maps"
)

// QUIC by connection ID in the lab: quic-go servers on the backends issue connection IDs that
// carry their QUIC-LB server ID, behind the XDP forwarder (IPIP DSR, decap on the backends).

const (
	quicVIPID    = 5
	quicPort     = 443
	quicALPN     = "switchyard-quic-test"
	quicConfigID = 1
	quicSIDLen   = 2
	quicTransfer = 3 << 20 // bytes each connection downloads
)

// katranGenerator issues connection IDs of Katran's scheme, version 1: two version bits, the
// 16-bit server ID, random bits (8 bytes in all).
type katranGenerator struct{ sid uint16 }

func (g katranGenerator) GenerateConnectionID() (quic.ConnectionID, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return quic.ConnectionID{}, err
	}
	b[0] = 1<<6 | byte(g.sid>>10)
	b[1] = byte(g.sid >> 2)
	b[2] = byte(g.sid<<6) | b[2]&0x3f
	return quic.ConnectionIDFromBytes(b), nil
}

func (g katranGenerator) ConnectionIDLen() int { return 8 }

func quicTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "vip"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos: []string{quicALPN}, InsecureSkipVerify: true}
}

// quicConf is both sides' configuration. The receive windows are small so that the client holds
// at most 128 KiB it has not read: most of each answer crosses the network after each move.
func quicConf() *quic.Config {
	const window = 128 << 10
	return &quic.Config{MaxIdleTimeout: 15 * time.Second, HandshakeIdleTimeout: 5 * time.Second,
		DisablePathMTUDiscovery:    true,
		InitialStreamReceiveWindow: window, MaxStreamReceiveWindow: window,
		InitialConnectionReceiveWindow: window, MaxConnectionReceiveWindow: window}
}

// quicServer is one backend's server: every connection gets one stream, whose request is a byte
// count; the answer is the server's name on a line, then that many bytes of a fixed pattern.
type quicServer struct {
	name     string
	accepted atomic.Int32
	mu       sync.Mutex
	remotes  []string // the client address of each connection when it closed
}

func startQUICServer(t *testing.T, ctx context.Context, n topo.Node, gen quic.ConnectionIDGenerator, tlsConf *tls.Config) *quicServer {
	t.Helper()
	pc, err := namednetns.ListenPacket(n.NS, "udp4", netip.AddrPortFrom(lab.WebVIP4, quicPort).String())
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc, ConnectionIDGenerator: gen}
	ln, err := tr.Listen(tlsConf, quicConf())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); tr.Close() })
	s := &quicServer{name: n.Name}
	go func() {
		for {
			c, err := ln.Accept(ctx)
			if err != nil {
				return
			}
			s.accepted.Add(1)
			go s.serve(ctx, c)
		}
	}()
	return s
}

func (s *quicServer) serve(ctx context.Context, c *quic.Conn) {
	st, err := c.AcceptStream(ctx)
	if err != nil {
		return
	}
	line, err := bufio.NewReader(st).ReadString('\n')
	if err != nil {
		return
	}
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return
	}
	fmt.Fprintf(st, "%s\n", s.name)
	buf := make([]byte, 32<<10)
	for off := 0; off < n; off += len(buf) {
		m := min(len(buf), n-off)
		for i := range buf[:m] {
			buf[i] = byte((off + i) % 251)
		}
		if _, err := st.Write(buf[:m]); err != nil {
			return
		}
	}
	st.Close()
	<-c.Context().Done() // the client closes when it has read everything
	s.mu.Lock()
	s.remotes = append(s.remotes, c.RemoteAddr().String())
	s.mu.Unlock()
}

// quicClient is one connection's client side.
type quicClient struct {
	t       *testing.T
	ns      string
	conn    *quic.Conn
	rd      *bufio.Reader
	st      *quic.Stream
	backend string
	read    int
}

func dialQUIC(t *testing.T, ctx context.Context, n topo.Node, tlsConf *tls.Config) *quicClient {
	t.Helper()
	tr := quicTransport(t, n.NS, n.Addr4)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := tr.Dial(dctx, net.UDPAddrFromAddrPort(netip.AddrPortFrom(lab.WebVIP4, quicPort)), tlsConf, quicConf())
	if err != nil {
		t.Fatalf("dial the QUIC VIP from %s: %v", n.Name, err)
	}
	t.Cleanup(func() { c.CloseWithError(0, "") })
	st, err := c.OpenStreamSync(dctx)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(st, "%d\n", quicTransfer)
	qc := &quicClient{t: t, ns: n.NS, conn: c, st: st, rd: bufio.NewReaderSize(st, 64<<10)}
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := qc.rd.ReadString('\n')
	if err != nil {
		t.Fatalf("read the backend's name: %v", err)
	}
	qc.backend = strings.TrimSpace(line)
	return qc
}

// quicTransport opens a UDP socket on a client address (port chosen by the kernel).
func quicTransport(t *testing.T, ns string, a netip.Addr) *quic.Transport {
	t.Helper()
	pc, err := namednetns.ListenPacket(ns, "udp4", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: pc}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// readSome reads n more bytes of the answer and checks them against the pattern.
func (qc *quicClient) readSome(n int) error {
	buf := make([]byte, 32<<10)
	qc.st.SetReadDeadline(time.Now().Add(10 * time.Second))
	for n > 0 {
		m, err := qc.rd.Read(buf[:min(len(buf), n)])
		for i := 0; i < m; i++ {
			if buf[i] != byte((qc.read+i)%251) {
				return fmt.Errorf("byte %d of the answer is wrong", qc.read+i)
			}
		}
		qc.read += m
		n -= m
		if err == io.EOF && n > 0 {
			return fmt.Errorf("answer ended after %d bytes", qc.read)
		}
		if err != nil && err != io.EOF {
			return fmt.Errorf("read at byte %d: %w", qc.read, err)
		}
	}
	return nil
}

// migrate moves the connection to a new UDP socket on local address a: probe the new path,
// then switch to it.
func (qc *quicClient) migrate(ctx context.Context, a netip.Addr) error {
	tr := quicTransport(qc.t, qc.ns, a)
	p, err := qc.conn.AddPath(tr)
	if err != nil {
		return fmt.Errorf("add path: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := p.Probe(pctx); err != nil {
		return fmt.Errorf("probe the path from %s: %w", tr.Conn.LocalAddr(), err)
	}
	if err := p.Switch(); err != nil {
		return fmt.Errorf("switch to the path from %s: %w", tr.Conn.LocalAddr(), err)
	}
	return nil
}

// TestQUICMigrationKeepsBackend: two clients download through the QUIC VIP; mid-transfer each
// moves to a new UDP port, then, after the VIP's backend set changed (a backend added, the
// serving ones drained, so that no ring slot leads to them), to a new local address. Both
// transfers complete on the backend they started on, and the forwarder counts packets routed by
// connection ID. Without routing by connection ID the second move sends the client's packets to
// another backend, which knows no such connection, and the path probe fails.
func TestQUICMigrationKeepsBackend(t *testing.T) {
	lb, err := maps.QUICLBFlags(quicSIDLen, quicConfigID)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("quic-lb", func(t *testing.T) {
		quicMigration(t, lb, func(sid uint16) quic.ConnectionIDGenerator {
			return quiclb.Config{ServerID: uint32(sid), ServerIDLen: quicSIDLen, ConfigID: quicConfigID}.Generator()
		})
	})
	t.Run("katran", func(t *testing.T) {
		quicMigration(t, maps.QUICKatran, func(sid uint16) quic.ConnectionIDGenerator { return katranGenerator{sid} })
	})
}

// quicMigration is TestQUICMigrationKeepsBackend for one scheme: the VIP's flags, and the
// backends' connection ID generator for a server ID.
func quicMigration(t *testing.T, flags maps.VIPFlags, gen func(sid uint16) quic.ConnectionIDGenerator) {
	l := testLabSpec(t, lab.Spec{Clients: 2, Balancers: 1, Backends: 4})
	fw := withForwarder(t, l)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	tlsConf := quicTLS(t)
	nodes := l.Topo.ByRole(topo.Backend)
	key := maps.VIPKey{Addr: lab.WebVIP4, Port: quicPort, Proto: maps.UDP}
	servers := map[string]*quicServer{}
	sids := map[uint32]uint32{}
	for i, n := range nodes {
		sid := uint16(0x0100 + i)
		servers[n.Name] = startQUICServer(t, ctx, n, gen(sid), tlsConf)
		id, err := fw.BackendID(n.Addr4)
		if err != nil {
			t.Fatal(err)
		}
		sids[uint32(sid)] = id
	}
	if err := fw.Maps.SetQUICServers(sids); err != nil {
		t.Fatal(err)
	}
	// ring puts the VIP with the backends named in weights (0: drained, kept in the slot).
	ring := func(weights map[string]uint32) {
		var bes []fwd.Backend
		for _, n := range nodes {
			if w, ok := weights[n.Name]; ok {
				bes = append(bes, fwd.Backend{Addr: n.Addr4, Weight: w})
			}
		}
		if err := fw.SetVIP(key, quicVIPID, flags, bes); err != nil {
			t.Fatal(err)
		}
	}
	ring(map[string]uint32{nodes[0].Name: 1, nodes[1].Name: 1, nodes[2].Name: 1})

	clients := []*quicClient{dialQUIC(t, ctx, l.Client(1), tlsConf), dialQUIC(t, ctx, l.Client(2), tlsConf)}
	serving := map[string]bool{}
	for _, c := range clients {
		serving[c.backend] = true
		if err := c.readSome(quicTransfer / 4); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range clients {
		if err := c.migrate(ctx, l.Client(i+1).Addr4); err != nil {
			t.Fatalf("client %d, first move (new port): %v", i+1, err)
		}
		if err := c.readSome(quicTransfer / 4); err != nil {
			t.Fatalf("client %d after the first move: %v", i+1, err)
		}
	}
	// The backend set changes: the fourth backend joins, the serving ones are drained.
	weights := map[string]uint32{}
	for _, n := range nodes {
		weights[n.Name] = 1
		if serving[n.Name] {
			weights[n.Name] = 0
		}
	}
	ring(weights)
	// What the forwarder sends the serving backends from here on (the clients' acknowledgments
	// of the rest of the answers) must reach them by connection ID.
	servedPackets := func() uint64 {
		var n uint64
		for _, nd := range nodes {
			if serving[nd.Name] {
				id, _ := fw.BackendID(nd.Addr4)
				c, err := fw.Maps.BackendStats(id)
				if err != nil {
					t.Fatal(err)
				}
				n += c.Packets
			}
		}
		return n
	}
	before := servedPackets()
	moved := make([]netip.Addr, len(clients))
	for i, c := range clients {
		n := l.Client(i + 1)
		seg := l.Topo.Segment(n.Segment)
		a := seg.Net4.Addr().As4()
		a[3] = byte(200 + i)
		moved[i] = netip.AddrFrom4(a)
		if out, err := exec.Command("ip", "-n", n.NS, "addr", "add", netip.PrefixFrom(moved[i], seg.Net4.Bits()).String(), "dev", n.Iface, "nodad").CombinedOutput(); err != nil {
			t.Fatalf("add address %s to %s: %v: %s", moved[i], n.Name, err, out)
		}
		if err := c.migrate(ctx, moved[i]); err != nil {
			t.Fatalf("client %d, second move (new address %s, backends changed): %v", i+1, moved[i], err)
		}
		if err := c.readSome(quicTransfer - c.read); err != nil {
			t.Fatalf("client %d after the second move: %v", i+1, err)
		}
		c.conn.CloseWithError(0, "done")
	}
	if n := servedPackets() - before; n < 50 {
		t.Errorf("%d packets reached the serving backends after they were drained, want the acknowledgments of the answers' rest (>= 50)", n)
	}
	var accepted int32
	for name, s := range servers {
		accepted += s.accepted.Load()
		if !serving[name] && s.accepted.Load() != 0 {
			t.Errorf("%s accepted %d connections: a moved client reached another backend", name, s.accepted.Load())
		}
	}
	if accepted != 2 {
		t.Errorf("%d connections accepted in all, want 2 (one per client)", accepted)
	}
	for i, c := range clients {
		s := servers[c.backend]
		testutil.Eventually(t, 5*time.Second, func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, r := range s.remotes {
				if strings.HasPrefix(r, moved[i].String()+":") {
					return true
				}
			}
			return false
		}, "the server did not see the client move")
	}
	cs, err := fw.Maps.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cs["quic_cid_routed"].Packets == 0 || cs["quic_initial_fallback"].Packets == 0 {
		t.Errorf("quic counters: routed %d, initial %d: want both > 0", cs["quic_cid_routed"].Packets, cs["quic_initial_fallback"].Packets)
	}
	t.Logf("backends %v; quic_cid_routed %d, quic_initial_fallback %d, unknown %d, no id %d", serving,
		cs["quic_cid_routed"].Packets, cs["quic_initial_fallback"].Packets, cs["quic_cid_unknown_fallback"].Packets, cs["quic_no_server_id_fallback"].Packets)
}
