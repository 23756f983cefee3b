package dns

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader/dnsxdp"
)

const xdpTestZone = `
listen: 127.0.0.1:0
zones:
  - origin: example.com.
    soa: {ns: ns1, mbox: hostmaster, serial: 1, minimum: 60}
    records:
      - "@ NS ns1"
      - "ns1 A 192.0.2.53"
      - "www A 192.0.2.1"
      - "www AAAA 2001:db8::1"
      - "cdn CNAME www"
      - "@ MX 10 mail"
      - "mail A 192.0.2.25"
      - "@ TXT \"v=spf1 -all\""
      - "_sip._udp SRV 10 5 5060 sip"
      - "sip A 192.0.2.60"
      - "@ CAA 0 issue \"letsencrypt.org\""
      - "sub NS ns.sub"
      - "ns.sub A 192.0.2.77"
      - "big TXT \"` + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" + `\" \"` + "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" + `\" \"` + "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc" + `\""
    names:
      - name: app
        policy: failover
        chain: [a, b]
        sites:
          - {name: a, addresses: [198.51.100.1]}
          - {name: b, addresses: [198.51.100.2]}
`

// xdpTestServer is a server of xdpTestZone that is not started, with a loaded program whose
// listener is lis and whose map the server fills as the socket path would.
func xdpTestServer(t testing.TB, lis netip.AddrPort, yaml string) (*Server, *dnsxdp.Program) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireKernel(t, testutil.XDP)
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	prog, err := dnsxdp.Load()
	if err != nil {
		t.Fatal(err)
	}
	x := &xdpPath{prog: prog, log: srv.log, listen: lis, slots: map[xdpSlotKey]uint32{}, lastPass: map[string]uint64{},
		stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() {
		x.purging.Lock() // a purge after a reload may still run
		defer x.purging.Unlock()
		prog.Close()
	})
	if err := x.register(srv.opt.Registry); err != nil {
		t.Fatal(err)
	}
	srv.xdp = x
	x.advance(srv.state.Load())
	x.purging.Lock() // the first purge has nothing to do; wait for it
	x.purging.Unlock()
	return srv, prog
}

// frame wraps a DNS payload in Ethernet, IP and UDP headers from client to server.
func frame(client, server netip.AddrPort, payload []byte) []byte {
	var b []byte
	eth := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0, 0}
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], client.Port())
	binary.BigEndian.PutUint16(udp[2:], server.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	if client.Addr().Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip := make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+8+len(payload)))
		ip[8], ip[9] = 64, 17
		c, s := client.Addr().As4(), server.Addr().As4()
		copy(ip[12:], c[:])
		copy(ip[16:], s[:])
		binary.BigEndian.PutUint16(ip[10:], ^onesSum(ip, 0))
		b = append(append(eth, ip...), udp...)
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x86dd)
		ip := make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(8+len(payload)))
		ip[6], ip[7] = 17, 64
		c, s := client.Addr().As16(), server.Addr().As16()
		copy(ip[8:], c[:])
		copy(ip[24:], s[:])
		b = append(append(eth, ip...), udp...)
	}
	return append(b, payload...)
}

// onesSum is the 16-bit one's complement sum of b (big-endian words) plus seed.
func onesSum(b []byte, seed uint32) uint16 {
	s := seed
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// checkAnswerFrame checks an answer frame's headers (addresses and ports swapped, lengths,
// checksums that verify) and returns its DNS payload.
func checkAnswerFrame(t *testing.T, out []byte, client, server netip.AddrPort) []byte {
	t.Helper()
	var l3 []byte
	var pseudo []byte
	if client.Addr().Is4() {
		if binary.BigEndian.Uint16(out[12:]) != 0x0800 {
			t.Fatalf("answer is not IPv4: % x", out[:14])
		}
		l3 = out[14:34]
		if onesSum(l3, 0) != 0xffff {
			t.Fatalf("IPv4 header checksum does not verify: % x", l3)
		}
		if !bytes.Equal(l3[12:16], server.Addr().AsSlice()) || !bytes.Equal(l3[16:20], client.Addr().AsSlice()) {
			t.Fatalf("IPv4 addresses not swapped: % x", l3)
		}
		if int(binary.BigEndian.Uint16(l3[2:])) != len(out)-14 {
			t.Fatalf("IPv4 total length %d, frame has %d after Ethernet", binary.BigEndian.Uint16(l3[2:]), len(out)-14)
		}
		pseudo = append(append([]byte{}, l3[12:20]...), 0, 17)
	} else {
		l3 = out[14:54]
		if !bytes.Equal(l3[8:24], server.Addr().AsSlice()) || !bytes.Equal(l3[24:40], client.Addr().AsSlice()) {
			t.Fatalf("IPv6 addresses not swapped: % x", l3)
		}
		pseudo = append(append([]byte{}, l3[8:40]...), 0, 17)
	}
	udp := out[14+len(l3):]
	if binary.BigEndian.Uint16(udp[0:]) != server.Port() || binary.BigEndian.Uint16(udp[2:]) != client.Port() {
		t.Fatalf("UDP ports not swapped: % x", udp[:8])
	}
	if int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
		t.Fatalf("UDP length %d, datagram has %d", binary.BigEndian.Uint16(udp[4:]), len(udp))
	}
	pseudo = binary.BigEndian.AppendUint16(pseudo, uint16(len(udp)))
	if s := onesSum(udp, uint32(onesSum(pseudo, 0))); s != 0xffff {
		t.Fatalf("UDP checksum does not verify (sum %#x)", s)
	}
	return udp[8:]
}

func runXDP(t *testing.T, prog *dnsxdp.Program, in []byte) (uint32, []byte) {
	t.Helper()
	opts := &ebpf.RunOptions{Data: in, DataOut: make([]byte, len(in)+1024), Repeat: 1}
	ret, err := prog.Prog().Run(opts)
	if err != nil {
		t.Fatalf("run xdp program: %v", err)
	}
	return ret, opts.DataOut
}

// xdpQuery packs a query with the given case, ID, RD and CD bits and EDNS shape.
func xdpQuery(name string, qtype uint16, id uint16, rd, cd, edns bool) []byte {
	shape := ""
	if edns {
		shape = "opt"
	}
	return xdpQueryShape(name, qtype, id, rd, cd, shape)
}

// xdpQueryShape is xdpQuery with an EDNS shape: "" (no OPT), "opt" (no options), or an OPT
// carrying one DNS COOKIE option, "cookie:HEX" (RFC 7873: 8 bytes of client cookie, or 16-40
// with a server cookie).
func xdpQueryShape(name string, qtype uint16, id uint16, rd, cd bool, shape string) []byte {
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = id
	m.RecursionDesired = rd
	m.CheckingDisabled = cd
	if shape != "" {
		m.SetEdns0(1232, false)
	}
	if c, ok := strings.CutPrefix(shape, "cookie:"); ok {
		m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: c})
	}
	b, err := m.Pack()
	if err != nil {
		panic(err)
	}
	return b
}

// TestXDPAnswersMatchSocketPath: for each static answer type, the program's answer to a query
// (another ID, letter case, RD and CD than the one that filled the map) is byte for byte the
// socket path's answer to that query, in a frame whose checksums verify, over IPv4 and IPv6.
func TestXDPAnswersMatchSocketPath(t *testing.T) {
	for _, fam := range []struct {
		name           string
		client, server netip.AddrPort
	}{
		{"v4", netip.MustParseAddrPort("192.0.2.200:40000"), netip.MustParseAddrPort("192.0.2.53:53")},
		{"v6", netip.MustParseAddrPort("[2001:db8::200]:40001"), netip.MustParseAddrPort("[2001:db8::53]:53")},
	} {
		t.Run(fam.name, func(t *testing.T) {
			srv, prog := xdpTestServer(t, fam.server, xdpTestZone)
			src := fam.client.Addr()
			cases := []struct {
				name  string
				qtype uint16
			}{
				{"www.example.com.", mdns.TypeA}, {"www.example.com.", mdns.TypeAAAA},
				{"cdn.example.com.", mdns.TypeA}, {"example.com.", mdns.TypeMX},
				{"example.com.", mdns.TypeTXT}, {"example.com.", mdns.TypeNS},
				{"example.com.", mdns.TypeSOA}, {"example.com.", mdns.TypeCAA},
				{"_sip._udp.example.com.", mdns.TypeSRV}, {"www.example.com.", mdns.TypeMX},
				{"big.example.com.", mdns.TypeTXT}, {"ns1.example.com.", mdns.TypeA},
				{"nope.example.com.", mdns.TypeA}, {"a.b.nope.example.com.", mdns.TypeAAAA},
			}
			// The shape of the query that fills the map, and of the one asked: a resolver that
			// sends cookies (BIND, dig) both fills the map and is answered by the program, and
			// gets the answer a plain OPT gets (the server ignores cookies, RFC 7873 5.2).
			shapes := [][2]string{{"", ""}, {"opt", "opt"}, {"cookie:0102030405060708", "cookie:1112131415161718"},
				{"opt", "cookie:1112131415161718" + "a1a2a3a4a5a6a7a8a9aaabacadaeafb0"}, {"cookie:0102030405060708", "opt"}}
			for _, c := range cases {
				for _, sh := range shapes {
					edns := sh[1]
					fill := xdpQueryShape(c.name, c.qtype, 1, false, false, sh[0])
					srv.Respond(fill, src, false) // packs and fills the map
					ask := xdpQueryShape(randCase(c.name), c.qtype, 0xbeef, true, true, sh[1])
					want := srv.Respond(ask, src, false)
					ret, out := runXDP(t, prog, frame(fam.client, fam.server, ask))
					if ret != 3 { // XDP_TX
						pc, _ := prog.PassCounts()
						t.Logf("pass counts %v", pc)
						t.Fatalf("%s %s filled by %q, asked %q: program returned %d, want XDP_TX", c.name, mdns.TypeToString[c.qtype], sh[0], edns, ret)
					}
					got := checkAnswerFrame(t, out, fam.client, fam.server)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s %s asked %q: xdp answer differs from the socket path's\n xdp:    % x\n socket: % x", c.name, mdns.TypeToString[c.qtype], edns, got, want)
					}
				}
			}
		})
	}
}

// randCase flips the case of every other letter (0x20 randomisation, deterministic).
func randCase(name string) string {
	b := []byte(name)
	for i := range b {
		if i%2 == 0 && b[i] >= 'a' && b[i] <= 'z' {
			b[i] -= 32
		}
	}
	return string(b)
}

// TestXDPPassesWhatItCannotAnswer: every query the program must leave to the socket comes back
// XDP_PASS with the frame unchanged, counted under its reason.
func TestXDPPassesWhatItCannotAnswer(t *testing.T) {
	client := netip.MustParseAddrPort("192.0.2.200:40000")
	server := netip.MustParseAddrPort("192.0.2.53:53")
	srv, prog := xdpTestServer(t, server, xdpTestZone)
	src := client.Addr()
	www := xdpQuery("www.example.com.", mdns.TypeA, 1, false, false, true)
	srv.Respond(www, src, false)
	withOpt := func(mut func(m *mdns.Msg)) []byte {
		m := new(mdns.Msg)
		if err := m.Unpack(www); err != nil {
			t.Fatal(err)
		}
		mut(m)
		b, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ecs := withOpt(func(m *mdns.Msg) {
		m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: []byte{10, 1, 0, 0}})
	})
	srv.Respond(ecs, src, false) // cached on the socket path, never packed for XDP
	do := withOpt(func(m *mdns.Msg) { m.IsEdns0().SetDo() })
	// A cookie is answered (TestXDPAnswersMatchSocketPath); a malformed one (9 bytes: RFC 7873
	// allows 8 or 16-40) or a cookie beside another option is the socket's.
	badCookie := withOpt(func(m *mdns.Msg) {
		m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: "010203040506070809"})
	})
	cookiePad := withOpt(func(m *mdns.Msg) {
		m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: "0102030405060708"},
			&mdns.EDNS0_PADDING{Padding: make([]byte, 4)})
	})
	nsid := withOpt(func(m *mdns.Msg) {
		m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_NSID{Code: mdns.EDNS0NSID, Nsid: "0102030405060708"})
	})
	chaos := withOpt(func(m *mdns.Msg) { m.Question[0].Qclass = mdns.ClassCHAOS })
	two := withOpt(func(m *mdns.Msg) { m.Question = append(m.Question, m.Question[0]) })
	notify := withOpt(func(m *mdns.Msg) { m.Opcode = mdns.OpcodeNotify })
	resp := withOpt(func(m *mdns.Msg) { m.Response = true })
	compressed := append([]byte{}, www[:12]...)
	compressed = append(compressed, 0xc0, 12, 0, 1, 0, 1)
	compressed[11] = 0
	uncached := xdpQuery("mail.example.com.", mdns.TypeA, 7, false, false, true)
	trailing := append(append([]byte{}, www...), 0)
	ipOpts := frame(client, server, www)
	ipOpts[14] = 0x46 // IHL 6: options
	frag := frame(client, server, www)
	frag[14+6] = 0x20 // MF
	otherPort := frame(client, netip.AddrPortFrom(server.Addr(), 54), www)
	otherAddr := frame(client, netip.MustParseAddrPort("192.0.2.54:53"), www)
	vlan := frame(client, server, www)
	vlan[12], vlan[13] = 0x81, 0x00
	cases := []struct {
		name, reason string
		frame        []byte
	}{
		{"ecs", "edns", frame(client, server, ecs)},
		{"do", "edns", frame(client, server, do)},
		{"cookie of 9 bytes", "edns", frame(client, server, badCookie)},
		{"cookie and padding", "edns", frame(client, server, cookiePad)},
		{"nsid the cookie's size", "edns", frame(client, server, nsid)},
		{"chaos", "class", frame(client, server, chaos)},
		{"two questions", "shape", frame(client, server, two)},
		{"notify", "shape", frame(client, server, notify)},
		{"response", "shape", frame(client, server, resp)},
		{"trailing byte", "edns", frame(client, server, trailing)},
		{"compressed qname", "name", frame(client, server, compressed)},
		{"not packed", "miss", frame(client, server, uncached)},
		{"ip options", "not_listener", ipOpts},
		{"fragment", "not_listener", frag},
		{"other port", "not_listener", otherPort},
		{"other address", "not_listener", otherAddr},
		{"vlan", "not_ip", vlan},
		{"ipv6 to a v4 listener", "not_listener", frame(netip.MustParseAddrPort("[2001:db8::1]:4000"), netip.MustParseAddrPort("[2001:db8::53]:53"), www)},
	}
	for _, c := range cases {
		before, _ := prog.PassCounts()
		in := append([]byte{}, c.frame...)
		ret, out := runXDP(t, prog, c.frame)
		if ret != 2 { // XDP_PASS
			t.Errorf("%s: program returned %d, want XDP_PASS", c.name, ret)
			continue
		}
		if !bytes.Equal(out, in) {
			t.Errorf("%s: passed frame was changed", c.name)
		}
		after, _ := prog.PassCounts()
		if after[c.reason] != before[c.reason]+1 {
			t.Errorf("%s: pass reason %s went %d -> %d (all: %v)", c.name, c.reason, before[c.reason], after[c.reason], after)
		}
	}
	// And the query itself is answered: the cases above pass for their own reason.
	if ret, _ := runXDP(t, prog, frame(client, server, www)); ret != 3 {
		t.Fatalf("www A: program returned %d, want XDP_TX", ret)
	}
}

// TestXDPReloadStopsOldAnswers: after a reload that changes an answer the program sends no
// answer packed before it (stale), and the socket path's new answer is packed and sent next.
func TestXDPReloadStopsOldAnswers(t *testing.T) {
	client := netip.MustParseAddrPort("192.0.2.200:40000")
	server := netip.MustParseAddrPort("192.0.2.53:53")
	srv, prog := xdpTestServer(t, server, xdpTestZone)
	q := xdpQuery("www.example.com.", mdns.TypeA, 1, false, false, true)
	srv.Respond(q, client.Addr(), false)
	if ret, _ := runXDP(t, prog, frame(client, server, q)); ret != 3 {
		t.Fatalf("before reload: program returned %d, want XDP_TX", ret)
	}
	cfg, err := config.Parse([]byte(strings.Replace(xdpTestZone, "www A 192.0.2.1", "www A 192.0.2.99", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if ret, _ := runXDP(t, prog, frame(client, server, q)); ret != 2 {
		t.Fatalf("after reload: program returned %d for an answer packed before it, want XDP_PASS", ret)
	}
	want := srv.Respond(q, client.Addr(), false)
	ret, out := runXDP(t, prog, frame(client, server, q))
	if ret != 3 {
		t.Fatalf("after the socket path answered: program returned %d, want XDP_TX", ret)
	}
	got := checkAnswerFrame(t, out, client, server)
	if !bytes.Equal(got, want) || !bytes.Contains(got, []byte{192, 0, 2, 99}) {
		t.Fatalf("after reload the xdp answer is not the new one\n xdp:    % x\n socket: % x", got, want)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return prog.Len() == 1 }, "stale answers not purged: %d in the map", func() any { return prog.Len() })
}

// TestXDPKeepsRRLAndQueryLogOnTheSocket: with rate_limit the program answers nothing (every
// query reaches the limiter), and with query_log nothing is packed (every query is logged).
func TestXDPKeepsRRLAndQueryLogOnTheSocket(t *testing.T) {
	client := netip.MustParseAddrPort("192.0.2.200:40000")
	server := netip.MustParseAddrPort("192.0.2.53:53")
	for _, c := range []struct{ name, extra, reason string }{
		{"rrl", "rate_limit: {responses_per_second: 100, slip: 2}\n", "off"},
		{"query log", "query_log: true\n", "miss"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, prog := xdpTestServer(t, server, c.extra+xdpTestZone)
			for _, name := range []string{"www.example.com.", "nope.example.com."} {
				q := xdpQuery(name, mdns.TypeA, 1, false, false, true)
				srv.Respond(q, client.Addr(), false)
				srv.Respond(q, client.Addr(), false)
				before, _ := prog.PassCounts()
				if ret, _ := runXDP(t, prog, frame(client, server, q)); ret != 2 {
					t.Fatalf("%s: program returned %d, want XDP_PASS", name, ret)
				}
				if after, _ := prog.PassCounts(); after[c.reason] != before[c.reason]+1 {
					t.Fatalf("%s: passed, but not as %s: %v", name, c.reason, after)
				}
			}
			if n := prog.Len(); n != 0 {
				t.Fatalf("%d answers packed, want none", n)
			}
		})
	}
}

// TestXDPPassesBadIPv6Headers: the program reads IPv6 with the forwarder's parser
// (bpf/include/parse.h): a version other than 6 (which the kernel drops) or a payload length past
// the frame is not the listener's, a cut header is not IP; the well-formed query is answered.
func TestXDPPassesBadIPv6Headers(t *testing.T) {
	client := netip.MustParseAddrPort("[2001:db8::200]:40001")
	server := netip.MustParseAddrPort("[2001:db8::53]:53")
	srv, prog := xdpTestServer(t, server, xdpTestZone)
	www := xdpQuery("www.example.com.", mdns.TypeAAAA, 1, false, false, true)
	srv.Respond(www, client.Addr(), false)
	version := frame(client, server, www)
	version[14] = 0x40
	long := frame(client, server, www)
	binary.BigEndian.PutUint16(long[14+4:], uint16(len(long)-14-40+1))
	cut := frame(client, server, www)[:14+39]
	for _, c := range []struct {
		name, reason string
		frame        []byte
	}{{"version 4", "not_listener", version}, {"payload past the frame", "not_listener", long}, {"cut header", "not_ip", cut}} {
		before, _ := prog.PassCounts()
		if ret, _ := runXDP(t, prog, c.frame); ret != 2 { // XDP_PASS
			t.Errorf("%s: program returned %d, want XDP_PASS", c.name, ret)
		}
		if after, _ := prog.PassCounts(); after[c.reason] != before[c.reason]+1 {
			t.Errorf("%s: pass reason %s went %d -> %d (all: %v)", c.name, c.reason, before[c.reason], after[c.reason], after)
		}
	}
	if ret, _ := runXDP(t, prog, frame(client, server, www)); ret != 3 {
		t.Fatalf("www AAAA: program returned %d, want XDP_TX", ret)
	}
}
