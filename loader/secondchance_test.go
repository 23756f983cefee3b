package loader_test

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
	"github.com/switchyard/switchyard/maps"
)

// The second-chance option, as docs/xdp.md ("Second chance") specifies it.
const (
	scOptType = 0x1e
	scMagic   = 0x5343
)

// scOpt4 is the IPv4 option naming cand.
func scOpt4(cand netip.Addr) []byte {
	o := []byte{scOptType, 8, scMagic >> 8, scMagic & 0xff}
	return append(o, cand.AsSlice()...)
}

// scDstOpt is the IPv6 destination-options header naming cand, before an inner packet of the
// given protocol (4 or 41).
func scDstOpt(next uint8, cand netip.Addr) []byte {
	o := []byte{next, 2, scOptType, 20, scMagic >> 8, scMagic & 0xff, 0, 0}
	return append(o, cand.AsSlice()...)
}

// outer4 builds an outer IPv4 header (with opts after it) in front of inner, checksum computed.
func outer4(tos, ttl uint8, id uint16, src, dst netip.Addr, opts, inner []byte) []byte {
	h := make([]byte, 20, 20+len(opts)+len(inner))
	h[0] = 0x40 | byte((20+len(opts))/4)
	h[1] = tos
	binary.BigEndian.PutUint16(h[2:], uint16(20+len(opts)+len(inner)))
	binary.BigEndian.PutUint16(h[4:], id)
	h[8], h[9] = ttl, 4
	if inner[0]>>4 == 6 {
		h[9] = 41
	}
	copy(h[12:], src.AsSlice())
	copy(h[16:], dst.AsSlice())
	h = append(h, opts...)
	binary.BigEndian.PutUint16(h[10:], csum(h, 0))
	return append(h, inner...)
}

// outer6 builds an outer IPv6 header; vtc is its first four bytes (version, class, flow label).
func outer6(vtc []byte, hop uint8, src, dst netip.Addr, ext, inner []byte) []byte {
	h := make([]byte, 40, 40+len(ext)+len(inner))
	copy(h, vtc[:4])
	binary.BigEndian.PutUint16(h[4:], uint16(len(ext)+len(inner)))
	h[6] = 4
	if inner[0]>>4 == 6 {
		h[6] = 41
	}
	if len(ext) > 0 {
		h[6] = 60
	}
	h[7] = hop
	copy(h[8:], src.AsSlice())
	copy(h[24:], dst.AsSlice())
	return append(append(h, ext...), inner...)
}

func ethFrame(dst, src net.HardwareAddr, l3 []byte) []byte {
	et := uint16(0x0800)
	if l3[0]>>4 == 6 {
		et = 0x86dd
	}
	f := append(append([]byte{}, dst...), src...)
	f = binary.BigEndian.AppendUint16(f, et)
	return append(f, l3...)
}

// changedRing gives VIP vipID the table of `after` as its ring and the table of `before` as its
// previous ring (what the reconciler writes when a backend is added), and returns both tables.
func (dp *dataplane) changedRing(vipID uint32, before, after []string) (prev, cur []uint32) {
	dp.t.Helper()
	build := func(bs []string) []maglev.Backend {
		var mb []maglev.Backend
		for _, b := range bs {
			mb = append(mb, maglev.Backend{ID: dp.backendID(b), Identity: b, Weight: 1})
		}
		return mb
	}
	prev = dp.ring(vipID, build(before))
	cur = dp.ring(vipID, build(after))
	if _, err := dp.s.WritePrevRing(vipID, nil, prev); err != nil {
		dp.t.Fatal(err)
	}
	return prev, cur
}

// flowsBy finds mid-stream packets of vipID whose previous and current picks differ (moved) or
// agree (kept).
func (dp *dataplane) flowsBy(vipID uint32, src, dst string, prev, cur []uint32, moved bool, n int) []pkt {
	var out []pkt
	for sport := uint16(10000); len(out) < n; sport++ {
		p := pkt{src: src, dst: dst, sport: sport, dport: 80, proto: "tcp", flags: "A", payload: 40}
		slot := maps.Slot(p.flow(), 0, testRing)
		if (prev[slot] != cur[slot]) == moved {
			out = append(out, p)
		}
	}
	return out
}

// TestSecondChanceSend: a mid-stream TCP packet without a connection-table entry whose previous
// pick differs from the current one goes to the current pick and carries the previous one in the
// outer header (IPv4 option, IPv6 destination options), byte for byte with valid checksums; so do
// the flow's next packets (its entry records the candidate). A SYN, a flow whose pick did not
// change, UDP, and everything with second chance off carry nothing; a candidate that would
// exceed the MTU is left off.
func TestSecondChanceSend(t *testing.T) {
	dp := newDataplane(t)
	dp.config(func(c *maps.Config) { c.SecondChance = true })
	dp.vip(0, vip4, 80, maps.TCP, 0)
	dp.vip(2, vip6, 80, maps.TCP, 0)
	prev4, cur4 := dp.changedRing(0, be4, append(append([]string{}, be4...), "198.18.3.4"))
	prev6, cur6 := dp.changedRing(2, be6, append(append([]string{}, be6...), "fd00:5e:3::3"))

	for _, fam := range []struct {
		name             string
		vipID            uint32
		client, vip      string
		prev, cur        []uint32
		expect           func(in, out []byte, first, cand netip.Addr) []byte
		plainOuterHeader int
	}{
		{"ipv4", 0, cli4, vip4, prev4, cur4, func(in, out []byte, first, cand netip.Addr) []byte {
			src, _ := netip.AddrFromSlice(out[14+12 : 14+16])
			return ethFrame(nextHopMAC, lbMAC, outer4(0, 64, 0, src, first, scOpt4(cand), l3(in)))
		}, 20},
		{"ipv6", 2, cli6, vip6, prev6, cur6, func(in, out []byte, first, cand netip.Addr) []byte {
			src, _ := netip.AddrFromSlice(out[14+8 : 14+24])
			return ethFrame(nextHopMAC, lbMAC, outer6(out[14:18], 64, src, first, scDstOpt(41, cand), l3(in)))
		}, 40},
	} {
		t.Run(fam.name, func(t *testing.T) {
			dp.t = t
			for _, p := range dp.flowsBy(fam.vipID, fam.client, fam.vip, fam.prev, fam.cur, true, 3) {
				slot := maps.Slot(p.flow(), 0, testRing)
				first, cand := dp.be[fam.cur[slot]], dp.be[fam.prev[slot]]
				for i, what := range []string{"miss", "connection-table hit"} {
					before := dp.counters()
					in := p.build(t)
					v, out := dp.run(in)
					if v != xdpTX {
						t.Fatalf("%s: verdict %s", what, verdictName[v])
					}
					sameBytes(t, what+" frame", out, fam.expect(in, out, first, cand))
					after := dp.counters()
					if after["second_chance_sent"].Packets != before["second_chance_sent"].Packets+1 {
						t.Fatalf("%s: second_chance_sent not incremented", what)
					}
					wantFlows := before["second_chance_flows"].Packets + uint64(1-i)
					if after["second_chance_flows"].Packets != wantFlows {
						t.Fatalf("%s: second_chance_flows %d, want %d", what, after["second_chance_flows"].Packets, wantFlows)
					}
				}
				e, ok, err := dp.s.LookupFlow(p.flow())
				if err != nil || !ok || e.SecondChance != fam.prev[slot] || e.Backend != fam.cur[slot] {
					t.Fatalf("entry %+v %v %v: want backend %d, candidate %d", e, ok, err, fam.cur[slot], fam.prev[slot])
				}
				// The same tuple's SYN starts a new connection on the current ring: no candidate.
				syn := p
				syn.flags = "S"
				_, out := dp.run(syn.build(t))
				if e := decodeEncap(t, out); e.outerDst != first || len(out) != 14+fam.plainOuterHeader+len(l3(syn.build(t))) {
					t.Fatalf("SYN: to %s, %d bytes: want %s without a candidate", e.outerDst, len(out), first)
				}
				if e, _, _ := dp.s.LookupFlow(p.flow()); e.SecondChance != 0 {
					t.Fatal("SYN kept the old candidate in the entry")
				}
			}
			// A flow whose pick is the same in both tables carries nothing.
			for _, p := range dp.flowsBy(fam.vipID, fam.client, fam.vip, fam.prev, fam.cur, false, 3) {
				in := p.build(t)
				_, out := dp.run(in)
				if len(out) != 14+fam.plainOuterHeader+len(l3(in)) {
					t.Fatalf("unchanged pick: %d bytes, want no candidate", len(out))
				}
			}
		})
	}
	dp.t = t

	// Over the MTU with the option, not without it: sent to the first choice, plainly.
	p := dp.flowsBy(0, cli4, vip4, prev4, cur4, true, 4)[3]
	p.payload = 1500 - 20 - 40 - 4 // 1476 bytes inside: 1496 with IPIP, 1504 with the option
	p.df = true
	before := dp.counters()
	v, out := dp.run(p.build(t))
	if v != xdpTX || out[14] != 0x45 {
		t.Fatalf("over-MTU with the option: verdict %s, outer %#x: want a plain IPIP frame", verdictName[v], out[14])
	}
	if after := dp.counters(); after["second_chance_too_big"].Packets != before["second_chance_too_big"].Packets+1 {
		t.Fatal("second_chance_too_big not incremented")
	}

	// The candidate must have the first choice's family (the option is in the outer header): an
	// IPv4 backend's flows moved to an IPv6 one carry nothing and count no second-chance flow.
	dp.vip(3, vipAP, 0, maps.TCP, 0)
	prevM, curM := dp.changedRing(3, be4[:1], []string{be4[0], be6[0]})
	mixed := dp.flowsBy(3, cli4, vipAP, prevM, curM, true, 1)[0]
	before = dp.counters()
	in := mixed.build(t)
	if _, out := dp.run(in); len(decodeEncap(t, out).inner) != len(l3(in)) {
		t.Fatal("mixed families: the packet carries a candidate")
	}
	if after := dp.counters(); after["second_chance_flows"] != before["second_chance_flows"] {
		t.Fatal("mixed families: counted as a second-chance flow")
	}

	// Second chance off: the same kind of miss goes plainly.
	dp.config(func(c *maps.Config) { c.SecondChance = false })
	p = dp.flowsBy(0, cli4, vip4, prev4, cur4, true, 5)[4]
	in = p.build(t)
	_, out = dp.run(in)
	if e := decodeEncap(t, out); len(e.inner) != len(l3(in)) {
		t.Fatal("second chance off: the packet carries a candidate")
	}
}

var routerMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0a}

// loopConn opens a real TCP connection on a loopback address of the test's namespace and returns
// its client and server ends as seen by the server: the 4-tuple a backend's stack owns.
func loopConn(t *testing.T, network, addr string) (client, server netip.AddrPort, listener netip.AddrPort) {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("no %s loopback here: %v", network, err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	lp := ln.Addr().(*net.TCPAddr).AddrPort()
	return c.LocalAddr().(*net.TCPAddr).AddrPort(), s.LocalAddr().(*net.TCPAddr).AddrPort(), lp
}

// TestSecondChanceDecap feeds hand-built tunnel packets with a candidate to xdp_decap: a flow this
// host's stack holds (a real loopback connection) is decapsulated here; one it does not hold (a
// listener only, or nothing) goes on to the candidate without the option, MACs swapped (XDP_TX),
// byte for byte with a valid checksum; a SYN, or a candidate that is this host, stays here;
// malformed options are dropped (IPv4) or, when they are not second chance, passed untouched
// (IPv6).
func TestSecondChanceDecap(t *testing.T) {
	testutil.RequireRoot(t)
	d := openDecap(t, "198.18.3.1", "fd00:5e:3::1")
	// The allow-lists admit the candidates and the balancer sources used below (forwarding is off
	// without them: TestSecondChanceDecapGuard).
	err := d.SetSecondChance(
		[]netip.Prefix{netip.MustParsePrefix("198.18.3.0/24"), netip.MustParsePrefix("fd00:5e:3::/64")},
		[]netip.Prefix{netip.MustParsePrefix("198.18.255.0/24"), netip.MustParsePrefix("fd00:5e:ff::/64")})
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range []struct {
		name, network, loop string
		self, cand, src     netip.Addr
		frame               func(inner []byte, dst, cand netip.Addr) []byte
		forwarded           func(inner []byte, cand netip.Addr) []byte
		decap               string
	}{
		{"ipv4", "tcp4", "127.0.0.1:0", netip.MustParseAddr("198.18.3.1"), netip.MustParseAddr("198.18.3.2"), netip.MustParseAddr("198.18.255.7"),
			func(inner []byte, dst, cand netip.Addr) []byte {
				return ethFrame(lbMAC, routerMAC, outer4(0x28, 63, 0, netip.MustParseAddr("198.18.255.7"), dst, scOpt4(cand), inner))
			},
			func(inner []byte, cand netip.Addr) []byte {
				return ethFrame(routerMAC, lbMAC, outer4(0x28, 63, 0, netip.MustParseAddr("198.18.255.7"), cand, nil, inner))
			}, "decap_ipip"},
		{"ipv6", "tcp6", "[::1]:0", netip.MustParseAddr("fd00:5e:3::1"), netip.MustParseAddr("fd00:5e:3::2"), netip.MustParseAddr("fd00:5e:ff::7"),
			func(inner []byte, dst, cand netip.Addr) []byte {
				return ethFrame(lbMAC, routerMAC, outer6([]byte{0x60, 0, 0, 7}, 63, netip.MustParseAddr("fd00:5e:ff::7"), dst, scDstOpt(41, cand), inner))
			},
			func(inner []byte, cand netip.Addr) []byte {
				return ethFrame(routerMAC, lbMAC, outer6([]byte{0x60, 0, 0, 7}, 63, netip.MustParseAddr("fd00:5e:ff::7"), cand, nil, inner))
			}, "decap_ip6ip6"},
	} {
		t.Run(fam.name, func(t *testing.T) {
			client, server, listener := loopConn(t, fam.network, fam.loop)
			seg := func(from, to netip.AddrPort, flags string) []byte {
				return l3(pkt{src: from.Addr().String(), dst: to.Addr().String(), sport: from.Port(), dport: to.Port(), proto: "tcp", flags: flags, payload: 30}.build(t))
			}
			owned := seg(client, server, "A")
			toListener := seg(netip.AddrPortFrom(client.Addr(), client.Port()+1), listener, "A")
			toNothing := seg(client, netip.AddrPortFrom(server.Addr(), 9), "PA")
			syn := seg(netip.AddrPortFrom(client.Addr(), client.Port()+2), listener, "S")

			decapped := func(inner []byte) func(t *testing.T, out []byte) {
				return func(t *testing.T, out []byte) { sameBytes(t, "decapsulated", l3(out), inner) }
			}
			for _, c := range []struct {
				name    string
				in      []byte
				verdict uint32
				counter string
				check   func(t *testing.T, out []byte)
			}{
				{"owned flow decapsulated", fam.frame(owned, fam.self, fam.cand), xdpPass, "second_chance_owned", decapped(owned)},
				{"listener only: forwarded", fam.frame(toListener, fam.self, fam.cand), xdpTX, "second_chance_forwarded",
					func(t *testing.T, out []byte) { sameBytes(t, "forwarded", out, fam.forwarded(toListener, fam.cand)) }},
				{"no socket: forwarded", fam.frame(toNothing, fam.self, fam.cand), xdpTX, "second_chance_forwarded",
					func(t *testing.T, out []byte) { sameBytes(t, "forwarded", out, fam.forwarded(toNothing, fam.cand)) }},
				{"SYN stays", fam.frame(syn, fam.self, fam.cand), xdpPass, "second_chance_skipped", decapped(syn)},
				{"candidate is this host", fam.frame(toListener, fam.self, fam.self), xdpPass, "second_chance_no_candidate", decapped(toListener)},
			} {
				t.Run(c.name, func(t *testing.T) {
					before := decapCounters(t, d)
					v, out := runDecap(t, d, c.in)
					if v != c.verdict {
						t.Fatalf("verdict %s, want %s", verdictName[v], verdictName[c.verdict])
					}
					after := decapCounters(t, d)
					if after[c.counter].Packets != before[c.counter].Packets+1 {
						t.Fatalf("counter %s not incremented", c.counter)
					}
					if c.verdict == xdpPass && after[fam.decap].Packets != before[fam.decap].Packets+1 {
						t.Fatalf("counter %s not incremented", fam.decap)
					}
					c.check(t, out)
				})
			}
		})
	}
	t.Run("malformed", func(t *testing.T) {
		inner := l3(pkt{src: cli4, dst: vip4, sport: 5, dport: 80, proto: "tcp", flags: "A"}.build(t))
		self, cand, src := netip.MustParseAddr("198.18.3.1"), netip.MustParseAddr("198.18.3.2"), netip.MustParseAddr("198.18.255.7")
		opt := func(mod func([]byte) []byte) []byte {
			return ethFrame(lbMAC, routerMAC, outer4(0, 63, 0, src, self, mod(scOpt4(cand)), inner))
		}
		inner6 := l3(pkt{src: cli6, dst: vip6, sport: 5, dport: 80, proto: "tcp", flags: "A"}.build(t))
		self6, cand6, src6 := netip.MustParseAddr("fd00:5e:3::1"), netip.MustParseAddr("fd00:5e:3::2"), netip.MustParseAddr("fd00:5e:ff::7")
		ext := func(mod func([]byte) []byte) []byte {
			return ethFrame(lbMAC, routerMAC, outer6([]byte{0x60, 0, 0, 0}, 63, src6, self6, mod(scDstOpt(41, cand6)), inner6))
		}
		for _, c := range []struct {
			name    string
			in      []byte
			verdict uint32
			counter string
		}{
			{"ipv4 wrong magic", opt(func(o []byte) []byte { o[2] = 0; return o }), xdpDrop, "second_chance_malformed"},
			{"ipv4 wrong option length", opt(func(o []byte) []byte { o[1] = 6; return o }), xdpDrop, "second_chance_malformed"},
			{"ipv4 other option", opt(func(o []byte) []byte { o[0] = 0x94; return o }), xdpDrop, "second_chance_malformed"},
			{"ipv4 option and NOPs", opt(func(o []byte) []byte { return append(o, 1, 1, 1, 0) }), xdpDrop, "second_chance_malformed"},
			{"ipv6 wrong magic", ext(func(o []byte) []byte { o[5] = 0; return o }), xdpDrop, "second_chance_malformed"},
			{"ipv6 wrong option length", ext(func(o []byte) []byte { o[3] = 18; return o }), xdpDrop, "second_chance_malformed"},
			{"ipv6 next header not a tunnel", ext(func(o []byte) []byte { o[0] = 6; return o }), xdpDrop, "second_chance_malformed"},
			{"ipv6 other destination option passes", ext(func(o []byte) []byte { o[2] = 4; return o }), xdpPass, "pass"},
		} {
			before := decapCounters(t, d)
			in := append([]byte(nil), c.in...)
			v, out := runDecap(t, d, c.in)
			if v != c.verdict {
				t.Fatalf("%s: verdict %s, want %s", c.name, verdictName[v], verdictName[c.verdict])
			}
			if after := decapCounters(t, d); after[c.counter].Packets != before[c.counter].Packets+1 {
				t.Fatalf("%s: counter %s not incremented", c.name, c.counter)
			}
			if v == xdpPass {
				sameBytes(t, c.name+": passed frame", out, in)
			}
		}
		// Truncated at every length inside the headers: never forwarded.
		full := opt(func(o []byte) []byte { return o })
		for n := 14; n < len(full); n++ {
			if v, _ := runDecap(t, d, append([]byte(nil), full[:n]...)); v == xdpTX {
				t.Fatalf("truncated to %d bytes: forwarded", n)
			}
		}
	})
}

func openDecap(t *testing.T, addrs ...string) *loader.Decap {
	t.Helper()
	d, err := loader.OpenDecap("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	if err := d.SetAddrs(as); err != nil {
		t.Fatal(err)
	}
	return d
}

func runDecap(t *testing.T, d *loader.Decap, frame []byte) (uint32, []byte) {
	t.Helper()
	opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+64)}
	v, err := d.Objs.XdpDecap.Run(&opts)
	if err != nil {
		t.Fatal(err)
	}
	return v, opts.DataOut
}

func decapCounters(t *testing.T, d *loader.Decap) map[string]bpfobj.LBCounter {
	t.Helper()
	c, err := d.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSecondChanceDecapGuard: xdp_decap forwards a second-chance packet only when the outer
// source is an allowed balancer source (the encap_source ranges) and the candidate is inside the
// allowed peer prefixes (the backends' networks); otherwise it decapsulates it here, as without
// second chance, and counts it refused. Nothing configured refuses every candidate (forwarding
// off). An IPv4 prefix never admits an IPv6 address. Bad lists are refused and change nothing.
func TestSecondChanceDecapGuard(t *testing.T) {
	testutil.RequireRoot(t)
	d := openDecap(t, "198.18.3.1", "fd00:5e:3::1")
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	peers := pfx("198.18.3.0/24", "fd00:5e:3::/64")
	sources := pfx("198.18.255.0/24", "fd00:5e:ff::/96")
	type fam struct {
		name                 string
		self, cand, out, src netip.Addr
		badSrc               netip.Addr
		inner                []byte
		frame, forwarded     func(src, cand netip.Addr) []byte
		decap                string
	}
	inner4 := l3(pkt{src: cli4, dst: vip4, sport: 4242, dport: 80, proto: "tcp", flags: "A", payload: 30}.build(t))
	inner6 := l3(pkt{src: cli6, dst: vip6, sport: 4242, dport: 80, proto: "tcp", flags: "A", payload: 30}.build(t))
	fams := []fam{
		{name: "ipv4", self: netip.MustParseAddr("198.18.3.1"), cand: netip.MustParseAddr("198.18.3.2"),
			out: netip.MustParseAddr("203.0.113.9"), src: netip.MustParseAddr("198.18.255.7"),
			badSrc: netip.MustParseAddr("198.51.100.7"), inner: inner4, decap: "decap_ipip"},
		{name: "ipv6", self: netip.MustParseAddr("fd00:5e:3::1"), cand: netip.MustParseAddr("fd00:5e:3::2"),
			out: netip.MustParseAddr("2001:db8::9"), src: netip.MustParseAddr("fd00:5e:ff::7"),
			badSrc: netip.MustParseAddr("fd00:5e:ff:1::7"), inner: inner6, decap: "decap_ip6ip6"},
	}
	for i := range fams {
		f := &fams[i]
		if f.name == "ipv4" {
			f.frame = func(src, cand netip.Addr) []byte {
				return ethFrame(lbMAC, routerMAC, outer4(0, 63, 0, src, f.self, scOpt4(cand), f.inner))
			}
			f.forwarded = func(src, cand netip.Addr) []byte {
				return ethFrame(routerMAC, lbMAC, outer4(0, 63, 0, src, cand, nil, f.inner))
			}
		} else {
			f.frame = func(src, cand netip.Addr) []byte {
				return ethFrame(lbMAC, routerMAC, outer6([]byte{0x60, 0, 0, 7}, 63, src, f.self, scDstOpt(41, cand), f.inner))
			}
			f.forwarded = func(src, cand netip.Addr) []byte {
				return ethFrame(routerMAC, lbMAC, outer6([]byte{0x60, 0, 0, 7}, 63, src, cand, nil, f.inner))
			}
		}
	}
	// refused runs a frame that must be decapsulated here and counted refused with the reason.
	refused := func(t *testing.T, f fam, in []byte, reason string) {
		t.Helper()
		before := decapCounters(t, d)
		v, out := runDecap(t, d, in)
		if v != xdpPass {
			t.Fatalf("verdict %s, want XDP_PASS (refused, decapsulated here)", verdictName[v])
		}
		sameBytes(t, "decapsulated", l3(out), f.inner)
		after := decapCounters(t, d)
		for _, c := range []string{"second_chance_refused", reason, f.decap} {
			if after[c].Packets != before[c].Packets+1 {
				t.Fatalf("counter %s: %d, want %d", c, after[c].Packets, before[c].Packets+1)
			}
		}
		if after["second_chance_forwarded"] != before["second_chance_forwarded"] {
			t.Fatal("second_chance_forwarded incremented")
		}
	}
	forwarded := func(t *testing.T, f fam, in, want []byte) {
		t.Helper()
		before := decapCounters(t, d)
		v, out := runDecap(t, d, in)
		if v != xdpTX {
			t.Fatalf("verdict %s, want XDP_TX (forwarded)", verdictName[v])
		}
		sameBytes(t, "forwarded", out, want)
		if after := decapCounters(t, d); after["second_chance_forwarded"].Packets != before["second_chance_forwarded"].Packets+1 {
			t.Fatal("second_chance_forwarded not incremented")
		}
	}
	t.Run("nothing configured: off", func(t *testing.T) {
		for _, f := range fams {
			refused(t, f, f.frame(f.src, f.cand), "second_chance_refused_source")
		}
	})
	if err := d.SetSecondChance(peers, sources); err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		t.Run(f.name, func(t *testing.T) {
			t.Run("allowed: forwarded", func(t *testing.T) { forwarded(t, f, f.frame(f.src, f.cand), f.forwarded(f.src, f.cand)) })
			t.Run("candidate outside the peers", func(t *testing.T) {
				refused(t, f, f.frame(f.src, f.out), "second_chance_refused_candidate")
			})
			t.Run("outer source not a balancer", func(t *testing.T) {
				refused(t, f, f.frame(f.badSrc, f.cand), "second_chance_refused_source")
			})
		})
	}
	gotP, gotS, err := d.SecondChance()
	if err != nil || fmt.Sprint(gotP) != fmt.Sprint(peers) || fmt.Sprint(gotS) != fmt.Sprint(sources) {
		t.Fatalf("read back %v %v %v, want %v %v", gotP, gotS, err, peers, sources)
	}

	// Bad lists are refused with the problem named, and the lists in force stay.
	for _, c := range []struct {
		peers, sources []netip.Prefix
		want           string
	}{
		{pfx("198.18.3.1/24"), sources, "198.18.3.1/24 has host bits set: give 198.18.3.0/24"},
		{pfx("::ffff:198.18.3.0/120"), sources, "IPv4-mapped"},
		{peers, pfx("198.18.255.0/24"), "IPv6 second-chance peers but no IPv6 tunnel sources"},
		{pfx("fd00:5e:3::/64"), pfx("198.18.255.0/24", "fd00:5e:ff::/96"), ""},
	} {
		t.Run(c.want, func(t *testing.T) {
			err := d.SetSecondChance(c.peers, c.sources)
			if c.want == "" {
				if err != nil {
					t.Fatalf("%v %v: %v", c.peers, c.sources, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%v %v: error %v, want %q", c.peers, c.sources, err, c.want)
			}
		})
	}
	// The last (valid) call replaced the lists: IPv4 candidates are refused now, IPv6 still go.
	refused(t, fams[0], fams[0].frame(fams[0].src, fams[0].cand), "second_chance_refused_candidate")
	forwarded(t, fams[1], fams[1].frame(fams[1].src, fams[1].cand), fams[1].forwarded(fams[1].src, fams[1].cand))

	// An IPv4 prefix admits no IPv6 address (the family is part of the key), even 0.0.0.0/0.
	if err := d.SetSecondChance(pfx("0.0.0.0/0"), pfx("0.0.0.0/0", "::/0")); err != nil {
		t.Fatal(err)
	}
	refused(t, fams[1], fams[1].frame(fams[1].src, fams[1].cand), "second_chance_refused_candidate")
	forwarded(t, fams[0], fams[0].frame(fams[0].badSrc, fams[0].out), fams[0].forwarded(fams[0].badSrc, fams[0].out))

	// Empty lists turn forwarding off again.
	if err := d.SetSecondChance(nil, nil); err != nil {
		t.Fatal(err)
	}
	refused(t, fams[0], fams[0].frame(fams[0].src, fams[0].cand), "second_chance_refused_source")
}
