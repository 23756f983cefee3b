package dns

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// xdpNetns makes a network namespace of the test's own with lo up, removed at the end.
func xdpNetns(t *testing.T) string {
	t.Helper()
	testutil.RequireLab(t)
	testutil.RequireKernel(t, testutil.XDP)
	name := fmt.Sprintf("sydnsxdp-%d", rand.Int63()%1e9)
	testutil.NamedNS(t, name)
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	return name
}

// startIn starts a server of yaml inside the namespace ns.
func startIn(t *testing.T, ns, yaml string) *Server {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	testutil.DoNamed(t, ns, func() error { return srv.Start(context.Background()) })
	t.Cleanup(func() { srv.Close() })
	return srv
}

// TestXDPEndToEnd runs a server with udp.xdp: generic on the lo of a namespace of its own beside
// one without: dig gets its answer from the program, a batch of random queries (names, case,
// types, EDNS shapes, flags) gets the same bytes from both, and after a reload that changes an
// answer both send the new one.
func TestXDPEndToEnd(t *testing.T) {
	ns := xdpNetns(t)
	withXDP := startIn(t, ns, strings.Replace(xdpTestZone, "listen: 127.0.0.1:0", "listen: 127.0.0.1:0\nudp: {xdp: generic}", 1))
	plain := startIn(t, ns, xdpTestZone)
	if withXDP.xdp == nil || plain.xdp != nil {
		t.Fatal("udp.xdp: generic did not attach, or the plain server has an XDP path")
	}
	dig := func(args ...string) string {
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "dig", "@127.0.0.1", "-p", fmt.Sprint(withXDP.Addr().Port()), "+tries=1", "+time=2", "+nocookie"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	digs := 0
	if _, err := exec.LookPath("dig"); err == nil {
		digs = 1
		dig("www.example.com", "A", "+short") // the socket path answers and packs
		if out := dig("WwW.ExAmPlE.CoM", "A"); !strings.Contains(out, "192.0.2.1") || !strings.Contains(out, "WwW.ExAmPlE.CoM.") {
			t.Fatalf("dig through xdp: %s", out)
		}
		if n := xdpAnswered(t, withXDP); n < 1 {
			t.Fatalf("the program answered %d queries, want dig's second", n)
		}
	}
	var conn *net.UDPConn
	testutil.DoNamed(t, ns, func() error {
		var err error
		conn, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
		return err
	})
	defer conn.Close()
	rng := rand.New(rand.NewSource(13))
	names := []string{"www.example.com.", "cdn.example.com.", "example.com.", "mail.example.com.", "_sip._udp.example.com.",
		"big.example.com.", "nope.example.com.", "x.sub.example.com.", "app.example.com.", "other.test."}
	types := []uint16{mdns.TypeA, mdns.TypeAAAA, mdns.TypeMX, mdns.TypeTXT, mdns.TypeNS, mdns.TypeSOA, mdns.TypeSRV, mdns.TypeCAA, mdns.TypeANY}
	compare := func(q []byte) {
		t.Helper()
		a := udpExchange(t, conn, withXDP.Addr(), q)
		b := udpExchange(t, conn, plain.Addr(), q)
		if !bytes.Equal(a, b) {
			t.Fatalf("xdp server and socket server differ for % x\n xdp:    % x\n socket: % x", q, a, b)
		}
	}
	before := xdpAnswered(t, withXDP)
	for i := 0; i < 400; i++ {
		name := names[rng.Intn(len(names))]
		b := []byte(name)
		for j := range b {
			if rng.Intn(2) == 0 && b[j] >= 'a' && b[j] <= 'z' {
				b[j] -= 32
			}
		}
		q := xdpQuery(string(b), types[rng.Intn(len(types))], uint16(rng.Intn(65536)), rng.Intn(2) == 0, rng.Intn(4) == 0, rng.Intn(3) != 0)
		if rng.Intn(10) == 0 { // a few the program must pass: DO=1, ECS
			m := new(mdns.Msg)
			m.Unpack(q)
			if m.IsEdns0() == nil {
				m.SetEdns0(1232, true)
			} else {
				m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: []byte{10, 1, 0, 0}})
			}
			q, _ = m.Pack()
		}
		compare(q)
	}
	if n := xdpAnswered(t, withXDP) - before; n < 100 {
		t.Fatalf("the program answered %d of 400 random queries; want most static ones", n)
	}
	// A reload that changes an answer: neither server sends the old one afterwards.
	q := xdpQuery("www.example.com.", mdns.TypeA, 99, true, false, true)
	compare(q)
	next := strings.Replace(xdpTestZone, "www A 192.0.2.1", "www A 192.0.2.99", 1)
	for _, s := range []*Server{withXDP, plain} {
		cfg, err := config.Parse([]byte(next))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 3; i++ { // the first packs, the next come from the program
		got := udpExchange(t, conn, withXDP.Addr(), q)
		if !bytes.Contains(got, []byte{192, 0, 2, 99}) || bytes.Contains(got, []byte{192, 0, 2, 1, 0}) {
			t.Fatalf("answer %d after reload is not the new one: % x", i, got)
		}
		compare(q)
	}
	// Every answer is counted once in queries_total, the program's among them.
	withXDP.xdp.sync()
	sent := 400 + 1 + 3 + 3 + 2*digs // the batch, one before the reload, three and three compared after it, dig
	if got := metricSum(t, withXDP, "switchyard_dns_queries_total"); got != float64(sent) {
		t.Fatalf("queries_total = %v, want the %d queries sent (each answer once, XDP or socket)", got, sent)
	}
	if got, want := metricSum(t, withXDP, "switchyard_dns_xdp_answers_total"), float64(xdpAnswered(t, withXDP)); got != want || got == 0 {
		t.Fatalf("xdp_answers_total = %v, want the program's %v", got, want)
	}
}

// metricSum adds up every series of a metric family of the server's registry.
func metricSum(t *testing.T, s *Server, name string) float64 {
	t.Helper()
	fams, err := s.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// xdpAnswered is how many answers the server's program sent.
func xdpAnswered(t *testing.T, s *Server) uint64 {
	t.Helper()
	c, err := s.xdp.prog.AnswerCounts(dnsxdpSlots(s))
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, x := range c {
		n += x
	}
	return n
}

func dnsxdpSlots(s *Server) int {
	s.xdp.mu.Lock()
	defer s.xdp.mu.Unlock()
	return len(s.xdp.slotOf)
}

// udpExchange sends q to server and returns the answer with q's ID.
func udpExchange(t *testing.T, c *net.UDPConn, server netip.AddrPort, q []byte) []byte {
	t.Helper()
	if _, err := c.WriteToUDPAddrPort(q, server); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	for {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("no answer from %s to % x: %v", server, q, err)
		}
		if n >= 2 && buf[0] == q[0] && buf[1] == q[1] {
			return append([]byte(nil), buf[:n]...)
		}
	}
}

// TestXDPNativeVeth: native mode on a veth between two namespaces of the test's own, over IPv4
// and IPv6: the client's kernel verifies the checksums the program wrote (loopback does not),
// so a wrong one loses the answer. The client's end runs xdp_pass (bpf/pass.c), without which
// a veth drops the frames XDP_TX sends it.
func TestXDPNativeVeth(t *testing.T) {
	srvNS, cliNS := xdpNetns(t), xdpNetns(t)
	for _, tool := range []string{"dig"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (make deps)", tool)
		}
	}
	vs, vc := fmt.Sprintf("vxs%d", rand.Intn(1e6)), fmt.Sprintf("vxc%d", rand.Intn(1e6))
	for _, cmd := range [][]string{
		{"ip", "link", "add", vs, "netns", srvNS, "type", "veth", "peer", "name", vc, "netns", cliNS},
		{"ip", "-n", srvNS, "addr", "add", "10.213.0.1/24", "dev", vs},
		{"ip", "-n", srvNS, "addr", "add", "fd00:213::1/64", "dev", vs, "nodad"},
		{"ip", "-n", cliNS, "addr", "add", "10.213.0.2/24", "dev", vc},
		{"ip", "-n", cliNS, "addr", "add", "fd00:213::2/64", "dev", vc, "nodad"},
		{"ip", "-n", srvNS, "link", "set", vs, "up"},
		{"ip", "-n", cliNS, "link", "set", vc, "up"},
		{"ip", "-n", cliNS, "link", "set", "dev", vc, "xdpdrv", "obj", "../loader/third_party/bpfobj/pass_bpfel.o", "sec", "xdp"},
	} {
		if out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
	}
	for _, addr := range []string{"10.213.0.1", "fd00:213::1"} {
		t.Run(addr, func(t *testing.T) {
			listen := netip.AddrPortFrom(netip.MustParseAddr(addr), 0).String()
			s := startIn(t, srvNS, strings.Replace(xdpTestZone, "listen: 127.0.0.1:0", "listen: \""+listen+"\"\nudp: {xdp: native}", 1))
			port := fmt.Sprint(s.Addr().Port())
			for i, name := range []string{"www.example.com", "WWW.example.COM", "wWw.ExAmPlE.cOm"} {
				out, err := exec.Command("ip", "netns", "exec", cliNS, "dig", "@"+addr, "-p", port, "+nocookie", "+tries=1", "+time=2", name, "AAAA").CombinedOutput()
				if err != nil || !strings.Contains(string(out), "2001:db8::1") || !strings.Contains(string(out), name+".") {
					dbg, _ := exec.Command("sh", "-c", "ip netns exec "+cliNS+" nstat -az | grep -i -E 'csum|InErr|Udp6?In'; ip -n "+cliNS+" -s link show "+vc+"; ip netns exec "+srvNS+" ethtool -S "+vs+"; ip netns exec "+cliNS+" ethtool -k "+vc+" | grep -i gro").CombinedOutput()
					t.Fatalf("dig %d (%s) over the veth: %v\n%s\n%s", i, name, err, out, dbg)
				}
			}
			if n := xdpAnswered(t, s); n < 2 {
				t.Fatalf("the program answered %d of 3 over the veth, want the last 2", n)
			}
		})
	}
}
