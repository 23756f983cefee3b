package loader_test

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"net/netip"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/maps"
)

const (
	vip4  = "198.18.100.1"
	vip6  = "fd00:5e:100::1"
	vipAP = "198.18.100.2" // any-port VIP
	vip46 = "198.18.100.3" // IPv4 VIP with IPv6 backends
	vipNB = "198.18.100.4" // VIP without backends
	cli4  = "198.18.1.10"
	cli6  = "fd00:5e:1::10"
)

var (
	be4 = []string{"198.18.3.1", "198.18.3.2", "198.18.3.3"}
	be6 = []string{"fd00:5e:3::1", "fd00:5e:3::2"}
)

// standard sets up the VIPs every table case uses.
func standard(t *testing.T) *dataplane {
	dp := newDataplane(t)
	dp.vip(0, vip4, 80, maps.TCP, 0, be4...)
	dp.vip(1, vip4, 53, maps.UDP, 0, be4...)
	dp.vip(2, vip6, 80, maps.TCP, 0, be6...)
	dp.vip(3, vipAP, 0, maps.TCP, 0, be4...)
	dp.vip(4, vip46, 443, maps.TCP, 0, be6...)
	dp.vip(5, vipNB, 80, maps.TCP, 0)
	return dp
}

// TestForwarding is the table of single-packet behaviours: verdict, output bytes and counter.
func TestForwarding(t *testing.T) {
	dp := standard(t)
	type check func(t *testing.T, in, out []byte, p pkt)
	encapTo := func(vipID uint32, family int, outerProto uint8, flags maps.VIPFlags) check {
		return func(t *testing.T, in, out []byte, p pkt) {
			e := decodeEncap(t, out)
			sameBytes(t, "inner packet", e.inner, l3(in))
			sameBytes(t, "ethernet destination", e.ethDst, nextHopMAC)
			sameBytes(t, "ethernet source", e.ethSrc, lbMAC)
			if e.vlan != p.vlan {
				t.Fatalf("vlan %d, want %d", e.vlan, p.vlan)
			}
			if e.ttl != 64 || e.tos != p.tos || e.outerProto != outerProto {
				t.Fatalf("outer ttl %d tos %#x proto %d; want 64 %#x %d", e.ttl, e.tos, e.outerProto, p.tos, outerProto)
			}
			if (family == 6) != e.outerV6 {
				t.Fatalf("outer family v6=%v, want %d", e.outerV6, family)
			}
			if want := dp.expectBackend(vipID, flags, p.flow()); e.outerDst != want {
				t.Fatalf("outer destination %s, want the Maglev choice %s", e.outerDst, want)
			}
			pfx := netip.PrefixFrom(src4Base, 16)
			if e.outerV6 {
				pfx = netip.PrefixFrom(src6Base, 96)
			}
			if !pfx.Contains(e.outerSrc) {
				t.Fatalf("outer source %s outside %s", e.outerSrc, pfx)
			}
		}
	}
	untouched := func(t *testing.T, in, out []byte, p pkt) { sameBytes(t, "passed frame", out, in) }

	cases := []struct {
		name    string
		p       pkt
		verdict uint32
		counter string
		check   check
	}{
		{"non-VIP TCP passes untouched", pkt{src: cli4, dst: "198.18.200.9", sport: 5000, dport: 22, proto: "tcp", flags: "S"}, xdpPass, "pass", untouched},
		{"VIP address, other port passes", pkt{src: cli4, dst: vip4, sport: 5000, dport: 22, proto: "tcp", flags: "S"}, xdpPass, "pass", untouched},
		{"non-VIP IPv6 passes", pkt{src: cli6, dst: "fd00:5e:9::1", sport: 5000, dport: 80, proto: "tcp", flags: "S"}, xdpPass, "pass", untouched},
		{"IPv4 TCP SYN to VIP: IPIP", pkt{src: cli4, dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "S", tos: 0x28, payload: 20}, xdpTX, "conntrack_miss_syn", encapTo(0, 4, 4, 0)},
		{"IPv4 UDP to VIP: IPIP", pkt{src: cli4, dst: vip4, sport: 40001, dport: 53, proto: "udp", payload: 30}, xdpTX, "conntrack_miss_nonsyn", encapTo(1, 4, 4, 0)},
		{"IPv6 TCP to VIP: IP6IP6", pkt{src: cli6, dst: vip6, sport: 40002, dport: 80, proto: "tcp", flags: "S", tos: 0xb8, payload: 10}, xdpTX, "conntrack_miss_syn", encapTo(2, 6, 41, 0)},
		{"IPv4 VIP to IPv6 backend: 4in6", pkt{src: cli4, dst: vip46, sport: 40003, dport: 443, proto: "tcp", flags: "S", tos: 0x10}, xdpTX, "conntrack_miss_syn", encapTo(4, 6, 4, 0)},
		{"any-port VIP", pkt{src: cli4, dst: vipAP, sport: 40004, dport: 8443, proto: "tcp", flags: "S"}, xdpTX, "conntrack_miss_syn", encapTo(3, 4, 4, 0)},
		{"802.1Q tagged frame keeps its tag", pkt{src: cli4, dst: vip4, sport: 40005, dport: 80, proto: "tcp", flags: "S", vlan: 42}, xdpTX, "conntrack_miss_syn", encapTo(0, 4, 4, 0)},
		{"mid-stream ACK without entry: Maglev", pkt{src: cli4, dst: vip4, sport: 40006, dport: 80, proto: "tcp", flags: "A", payload: 100}, xdpTX, "conntrack_miss_nonsyn", encapTo(0, 4, 4, 0)},
		{"IPv4 options toward VIP dropped", pkt{src: cli4, dst: vip4, sport: 40007, dport: 80, proto: "tcp", flags: "S", ipOpts: true}, xdpDrop, "drop_ip_options", nil},
		{"IPv4 options elsewhere pass", pkt{src: cli4, dst: "198.18.200.9", sport: 40007, dport: 80, proto: "tcp", flags: "S", ipOpts: true}, xdpPass, "pass", untouched},
		{"IPv4 first fragment toward VIP dropped", pkt{src: cli4, dst: vip4, sport: 40008, dport: 80, proto: "tcp", flags: "A", mf: true, payload: 100}, xdpDrop, "drop_fragment", nil},
		{"IPv4 later fragment toward VIP dropped", pkt{src: cli4, dst: vip4, proto: "udp", fragOff: 100, payload: 100}, xdpDrop, "drop_fragment", nil},
		{"IPv6 fragment header toward VIP dropped", pkt{src: cli6, dst: vip6, sport: 1, dport: 80, proto: "tcp", flags: "A", mf: true, payload: 64}, xdpDrop, "drop_fragment", nil},
		{"VIP without backends dropped", pkt{src: cli4, dst: vipNB, sport: 40009, dport: 80, proto: "tcp", flags: "S"}, xdpDrop, "drop_no_backend", nil},
		{"other protocol to a VIP address passes", pkt{src: cli4, dst: vip4, proto: "gre", payload: 40}, xdpPass, "pass", untouched},
		{"over-MTU IPv4 with DF answered with frag-needed", pkt{src: cli4, dst: vip4, sport: 40010, dport: 80, proto: "tcp", flags: "A", df: true, payload: 1500 - 40}, xdpTX, "icmp_toobig_sent", checkTooBig4(1480)},
		{"over-MTU IPv6 answered with packet-too-big", pkt{src: cli6, dst: vip6, sport: 40011, dport: 80, proto: "tcp", flags: "A", payload: 1500 - 60}, xdpTX, "icmp_toobig_sent", checkTooBig6(1460)},
		{"over-MTU IPv4 without DF dropped", pkt{src: cli4, dst: vip4, sport: 40012, dport: 80, proto: "tcp", flags: "A", payload: 1500 - 40}, xdpDrop, "drop_mtu", nil},
		{"largest IPv4 frame that fits is forwarded", pkt{src: cli4, dst: vip4, sport: 40013, dport: 80, proto: "tcp", flags: "A", df: true, payload: 1480 - 40}, xdpTX, "tx", encapTo(0, 4, 4, 0)},
		{"echo request to IPv4 VIP answered", pkt{src: cli4, dst: vip4, proto: "icmp", icmpType: 8, payload: 56}, xdpTX, "icmp_echo_replied", checkEcho4},
		{"echo request to IPv6 VIP answered", pkt{src: cli6, dst: vip6, proto: "icmp", icmpType: 128, payload: 56}, xdpTX, "icmp_echo_replied", checkEcho6},
		{"other ICMP to a VIP passes", pkt{src: cli4, dst: vip4, proto: "icmp", icmpType: 13, payload: 12}, xdpPass, "pass", untouched},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dp.t = t
			in := c.p.build(t)
			before := dp.counters()
			v, out := dp.run(in)
			if v != c.verdict {
				t.Fatalf("verdict %s, want %s", verdictName[v], verdictName[c.verdict])
			}
			after := dp.counters()
			if after[c.counter].Packets != before[c.counter].Packets+1 {
				t.Fatalf("counter %s went %d -> %d, want +1", c.counter, before[c.counter].Packets, after[c.counter].Packets)
			}
			if c.check != nil {
				c.check(t, in, out, c.p)
			}
		})
	}
}

func checkTooBig4(mtu uint16) func(t *testing.T, in, out []byte, p pkt) {
	return func(t *testing.T, in, out []byte, p pkt) {
		sameBytes(t, "ethernet destination", out[0:6], clientMAC)
		ip := out[14:]
		if len(out) != 14+20+8+64 || ip[9] != 1 || csum(ip[:20], 0) != 0 {
			t.Fatalf("bad ICMP frame: len %d proto %d", len(out), ip[9])
		}
		src, _ := netip.AddrFromSlice(ip[12:16])
		dst, _ := netip.AddrFromSlice(ip[16:20])
		if src.String() != p.dst || dst.String() != p.src {
			t.Fatalf("icmp %s -> %s, want %s -> %s", src, dst, p.dst, p.src)
		}
		ic := ip[20:]
		if ic[0] != 3 || ic[1] != 4 || binary.BigEndian.Uint16(ic[6:]) != mtu {
			t.Fatalf("icmp type %d code %d mtu %d, want 3/4/%d", ic[0], ic[1], binary.BigEndian.Uint16(ic[6:]), mtu)
		}
		if csum(ic, 0) != 0 {
			t.Fatal("icmp checksum invalid")
		}
		sameBytes(t, "quoted packet", ic[8:], l3(in)[:64])
	}
}

func checkTooBig6(mtu uint32) func(t *testing.T, in, out []byte, p pkt) {
	return func(t *testing.T, in, out []byte, p pkt) {
		ip := out[14:]
		if len(out) != 14+40+8+64 || ip[6] != 58 {
			t.Fatalf("bad ICMPv6 frame: len %d next %d", len(out), ip[6])
		}
		ic := ip[40:]
		if ic[0] != 2 || binary.BigEndian.Uint32(ic[4:]) != mtu {
			t.Fatalf("icmpv6 type %d mtu %d, want 2/%d", ic[0], binary.BigEndian.Uint32(ic[4:]), mtu)
		}
		if csum(ic, pseudo6(ip[8:24], ip[24:40], len(ic), 58)) != 0 {
			t.Fatal("icmpv6 checksum invalid")
		}
		src, _ := netip.AddrFromSlice(ip[8:24])
		if src.String() != p.dst {
			t.Fatalf("source %s, want the VIP", src)
		}
		sameBytes(t, "quoted packet", ic[8:], l3(in)[:64])
	}
}

func checkEcho4(t *testing.T, in, out []byte, p pkt) {
	sameBytes(t, "ethernet destination", out[0:6], in[6:12])
	ip := out[14:]
	if csum(ip[:20], 0) != 0 || ip[20] != 0 || csum(ip[20:], 0) != 0 {
		t.Fatalf("bad echo reply: type %d", ip[20])
	}
	sameBytes(t, "reply source", ip[12:16], in[14+16:14+20])
	sameBytes(t, "echo payload", ip[28:], in[14+28:])
}

func checkEcho6(t *testing.T, in, out []byte, p pkt) {
	ip := out[14:]
	ic := ip[40:]
	if ic[0] != 129 || csum(ic, pseudo6(ip[8:24], ip[24:40], len(ic), 58)) != 0 {
		t.Fatalf("bad echo reply: type %d", ic[0])
	}
	sameBytes(t, "echo payload", ic[8:], in[14+48:])
}

// TestICMPTooBigFollowsFlow: a frag-needed / packet-too-big toward a VIP, quoting a reply of a
// VIP flow, reaches the backend of that flow, with a full quote and with only 8 bytes of the
// quoted transport header.
func TestICMPTooBigFollowsFlow(t *testing.T) {
	dp := standard(t)
	for _, v6 := range []bool{false, true} {
		client, vip, icmpType, icmpCode := cli4, vip4, uint8(3), uint8(4)
		vipID := uint32(0)
		if v6 {
			client, vip, icmpType, icmpCode, vipID = cli6, vip6, 2, 0, 2
		}
		for _, sport := range []uint16{41000, 41001, 41002, 41003} {
			fwd := pkt{src: client, dst: vip, sport: sport, dport: 80, proto: "tcp", flags: "S"}
			v, out := dp.run(fwd.build(t))
			if v != xdpTX {
				t.Fatalf("SYN: %s", verdictName[v])
			}
			flowBackend := decodeEncap(t, out).outerDst
			// The reply the backend sent (VIP -> client) that a router could not forward.
			reply := pkt{src: vip, dst: client, sport: 80, dport: sport, proto: "tcp", flags: "A", payload: 1400}
			quoted := l3(reply.build(t))
			hdr := 20
			if v6 {
				hdr = 40
			}
			for _, q := range [][]byte{quoted[:hdr+20+16], quoted[:hdr+8]} {
				body := append([]byte{0, 0, 0x05, 0x78}, q...) // unused/MTU for v4; v6 gets its own mtu word
				if v6 {
					body = append([]byte{0, 0, 0x05, 0x00}, q...)
				}
				router := "198.18.0.1"
				if v6 {
					router = "fd00:5e::1"
				}
				icmp := pkt{src: router, dst: vip, proto: "icmp", icmpType: icmpType, icmpCode: icmpCode, icmpBody: body[4:]}
				if v6 {
					icmp.icmpBody = body // gopacket's ICMPv6 header is 4 bytes: the MTU word is body
				}
				frame := icmp.build(t)
				if !v6 {
					// gopacket's ICMPv4 header carries Id/Seq there; put the MTU word in by hand.
					copy(frame[14+20+4:14+20+8], body[:4])
				}
				fixICMPChecksum(frame, v6)
				before := dp.counters()["icmp_forwarded"].Packets
				v, out := dp.run(frame)
				if v != xdpTX {
					t.Fatalf("v6=%v quote %d bytes: verdict %s", v6, len(q), verdictName[v])
				}
				if dp.counters()["icmp_forwarded"].Packets != before+1 {
					t.Fatal("icmp_forwarded not counted")
				}
				e := decodeEncap(t, out)
				if e.outerDst != flowBackend {
					t.Fatalf("v6=%v quote %d bytes: ICMP went to %s, flow is on %s", v6, len(q), e.outerDst, flowBackend)
				}
				sameBytes(t, "forwarded icmp", e.inner, l3(frame))
			}
		}
		_ = vipID
	}
}

func fixICMPChecksum(frame []byte, v6 bool) {
	if !v6 {
		ic := frame[14+20:]
		ic[2], ic[3] = 0, 0
		binary.BigEndian.PutUint16(ic[2:], csum(ic, 0))
		return
	}
	ip := frame[14:]
	ic := ip[40:]
	ic[2], ic[3] = 0, 0
	binary.BigEndian.PutUint16(ic[2:], csum(ic, pseudo6(ip[8:24], ip[24:40], len(ic), 58)))
}

// TestConnectionTableSurvivesRingChange is the stateful sequence: an established flow keeps its
// backend when the ring changes (drain), its SYN re-hashes to the current ring, and removing the
// backend's slot makes even established packets re-hash.
func TestConnectionTableSurvivesRingChange(t *testing.T) {
	dp := newDataplane(t)
	dp.vip(0, vip4, 80, maps.TCP, 0, be4...)
	// Find flows that land on be4[0].
	var flows []pkt
	for sport := uint16(20000); len(flows) < 5; sport++ {
		p := pkt{src: cli4, dst: vip4, sport: sport, dport: 80, proto: "tcp", flags: "S"}
		if dp.expectBackend(0, 0, p.flow()).String() == be4[0] {
			flows = append(flows, p)
		}
	}
	for _, p := range flows {
		if v, _ := dp.run(p.build(t)); v != xdpTX {
			t.Fatal("SYN not forwarded")
		}
	}
	// Drain be4[0]: its slot stays, the ring leaves it out.
	var mb []maglev.Backend
	for _, b := range be4 {
		w := uint32(1)
		if b == be4[0] {
			w = 0
		}
		mb = append(mb, maglev.Backend{ID: dp.backendID(b), Identity: b, Weight: w})
	}
	dp.ring(0, mb)
	for _, p := range flows {
		ack := p
		ack.flags = "A"
		ack.payload = 50
		_, out := dp.run(ack.build(t))
		if got := decodeEncap(t, out).outerDst.String(); got != be4[0] {
			t.Fatalf("established flow moved to %s after the ring changed", got)
		}
		e, ok, err := dp.s.LookupFlow(p.flow())
		if err != nil || !ok || dp.be[e.Backend].String() != be4[0] {
			t.Fatalf("connection table entry: %+v %v %v", e, ok, err)
		}
		// A new SYN on the same tuple follows the current ring.
		_, out = dp.run(p.build(t))
		if got := decodeEncap(t, out).outerDst.String(); got == be4[0] {
			t.Fatalf("SYN re-hash still chose the drained backend")
		}
	}
	// FIN marks the entry closing; ActiveFlows stops counting it.
	fin := flows[0]
	fin.flags = "FA"
	dp.run(fin.build(t))
	if e, _, _ := dp.s.LookupFlow(fin.flow()); !e.Closing {
		t.Fatal("FIN did not mark the flow closing")
	}
	// Removing the backend slot makes established packets re-hash.
	dp.vip(0, vip4, 80, maps.TCP, 0, be4...) // ring back to all three
	for _, p := range flows[1:] {
		dp.run(p.build(t)) // SYN
	}
	if err := dp.s.DeleteBackend(dp.backendID(be4[1])); err != nil {
		t.Fatal(err)
	}
	dp.ring(0, []maglev.Backend{{ID: dp.backendID(be4[0]), Identity: be4[0], Weight: 1}, {ID: dp.backendID(be4[2]), Identity: be4[2], Weight: 1}})
	for sport := uint16(30000); sport < 30100; sport++ {
		p := pkt{src: cli4, dst: vip4, sport: sport, dport: 80, proto: "tcp", flags: "A"}
		_, out := dp.run(p.build(t))
		if decodeEncap(t, out).outerDst.String() == be4[1] {
			t.Fatal("packet reached a removed backend")
		}
	}
}

// TestUDPIdleTimeout: a UDP flow keeps its backend while active and re-hashes after the timeout.
func TestUDPIdleTimeout(t *testing.T) {
	dp := newDataplane(t)
	dp.vip(1, vip4, 53, maps.UDP, 0, be4[0])
	p := pkt{src: cli4, dst: vip4, sport: 5353, dport: 53, proto: "udp", payload: 20}
	_, out := dp.run(p.build(t))
	if decodeEncap(t, out).outerDst.String() != be4[0] {
		t.Fatal("first packet")
	}
	dp.vip(1, vip4, 53, maps.UDP, 0, be4[1])
	_, out = dp.run(p.build(t))
	if decodeEncap(t, out).outerDst.String() != be4[0] {
		t.Fatal("active UDP flow moved")
	}
	dp.config(func(c *maps.Config) { c.UDPTimeout = time.Millisecond })
	time.Sleep(5 * time.Millisecond)
	_, out = dp.run(p.build(t))
	if decodeEncap(t, out).outerDst.String() != be4[1] {
		t.Fatal("idle UDP flow did not re-hash after the timeout")
	}
}

// TestHashOptions: source-only hashing sends every connection of a client to one backend.
func TestHashOptions(t *testing.T) {
	dp := newDataplane(t)
	var many []string
	for i := 1; i <= 20; i++ {
		many = append(many, netip.AddrFrom4([4]byte{198, 18, 3, byte(i)}).String())
	}
	dp.vip(0, vip4, 80, maps.TCP, maps.HashSrcOnly, many...)
	dp.vip(1, vip4, 81, maps.TCP, 0, many...)
	seen := map[string]bool{}
	seen5 := map[string]bool{}
	for sport := uint16(1000); sport < 1050; sport++ {
		p := pkt{src: cli4, dst: vip4, sport: sport, dport: 80, proto: "tcp", flags: "S"}
		_, out := dp.run(p.build(t))
		seen[decodeEncap(t, out).outerDst.String()] = true
		p.dport = 81
		_, out = dp.run(p.build(t))
		seen5[decodeEncap(t, out).outerDst.String()] = true
	}
	if len(seen) != 1 {
		t.Fatalf("source-only hashing spread one client over %d backends", len(seen))
	}
	if len(seen5) < 5 {
		t.Fatalf("five-tuple hashing used only %d backends for 50 connections", len(seen5))
	}
}

// TestFlowHashMatchesGo: for IPv4 and IPv6 flows and every hash option, the backend the program
// picks for a new flow is the one the Go replica of the hash (maps.Slot) names, so `lb flow` and
// the control plane tell the truth about where a flow goes.
func TestFlowHashMatchesGo(t *testing.T) {
	dp := newDataplane(t)
	var many4, many6 []string
	for i := 1; i <= 20; i++ {
		many4 = append(many4, netip.AddrFrom4([4]byte{198, 18, 3, byte(i)}).String())
		many6 = append(many6, fmt.Sprintf("fd00:5e:3::%d", i))
	}
	id := uint32(0)
	for _, opt := range []maps.VIPFlags{0, maps.HashSrcOnly, maps.NoSrcPort} {
		for _, fam := range []struct {
			vip, cli string
			bes      []string
		}{{vip4, "198.18.1.%d", many4}, {vip6, "fd00:5e:1::%d", many6}} {
			port := uint16(8000 + id)
			dp.vip(id, fam.vip, port, maps.TCP, opt, fam.bes...)
			for i := range 40 {
				p := pkt{src: fmt.Sprintf(fam.cli, 10+i%7), dst: fam.vip, sport: uint16(2000 + 13*i), dport: port, proto: "tcp", flags: "S"}
				v, out := dp.run(p.build(t))
				if v != xdpTX {
					t.Fatalf("%s, options %#x: verdict %s", p.src, opt, verdictName[v])
				}
				if got, want := decodeEncap(t, out).outerDst, dp.expectBackend(id, opt, p.flow()); got != want {
					t.Fatalf("%s:%d -> %s:%d, options %#x: the program picked %s, the Go hash %s", p.src, p.sport, p.dst, port, opt, got, want)
				}
			}
			id++
		}
	}
}

// TestCountersAfterReplay replays a fixed mix and checks every counter it touches.
func TestCountersAfterReplay(t *testing.T) {
	dp := standard(t)
	mix := []struct {
		p pkt
		n int
	}{
		{pkt{src: cli4, dst: vip4, sport: 100, dport: 80, proto: "tcp", flags: "S", payload: 10}, 3},
		{pkt{src: cli4, dst: vip4, sport: 100, dport: 80, proto: "tcp", flags: "A", payload: 10}, 7},
		{pkt{src: cli4, dst: "198.18.9.9", sport: 100, dport: 80, proto: "tcp", flags: "S"}, 4},
		{pkt{src: cli4, dst: vipNB, sport: 100, dport: 80, proto: "tcp", flags: "S"}, 2},
		{pkt{src: cli4, dst: vip4, proto: "icmp", icmpType: 8, payload: 8}, 5},
	}
	var syn, ack int
	var synLen, ackLen uint64
	for _, m := range mix {
		frame := m.p.build(t)
		for i := 0; i < m.n; i++ {
			dp.run(frame)
		}
		if m.p.dst == vip4 && m.p.flags == "S" {
			syn, synLen = m.n, uint64(len(frame)-14)
		}
		if m.p.dst == vip4 && m.p.flags == "A" {
			ack, ackLen = m.n, uint64(len(frame)-14)
		}
	}
	c := dp.counters()
	want := map[string]uint64{"tx": 3 + 7 + 5, "pass": 4, "drop": 2, "drop_no_backend": 2, "conntrack_miss_syn": 3, "conntrack_hit": 7, "conntrack_miss_nonsyn": 0, "icmp_echo_replied": 5}
	for name, n := range want {
		if c[name].Packets != n {
			t.Errorf("counter %s = %d, want %d", name, c[name].Packets, n)
		}
	}
	vs, _ := dp.s.VIPStats(0)
	if vs.Packets != uint64(syn+ack) || vs.Bytes != uint64(syn)*synLen+uint64(ack)*ackLen {
		t.Errorf("vip stats %+v, want %d packets %d bytes", vs, syn+ack, uint64(syn)*synLen+uint64(ack)*ackLen)
	}
	var sum uint64
	for id := range dp.be {
		bs, _ := dp.s.BackendStats(id)
		sum += bs.Packets
	}
	if sum != uint64(syn+ack) {
		t.Errorf("backend stats sum %d, want %d", sum, syn+ack)
	}
}

// TestMalformed: truncations at every offset, bogus IHL and lengths, and random bytes are never
// forwarded to a backend, and a frame the program passes is never changed.
func TestMalformed(t *testing.T) {
	dp := standard(t)
	valid := []pkt{
		{src: cli4, dst: vip4, sport: 7, dport: 80, proto: "tcp", flags: "S", payload: 8},
		{src: cli6, dst: vip6, sport: 7, dport: 80, proto: "tcp", flags: "S", payload: 8},
		{src: cli4, dst: vip4, sport: 7, dport: 53, proto: "udp", payload: 8},
		{src: cli4, dst: vip4, sport: 7, dport: 80, proto: "tcp", flags: "S", vlan: 5, payload: 8},
	}
	check := func(name string, frame []byte) {
		in := append([]byte(nil), frame...)
		v, out := dp.run(frame)
		if v == xdpTX {
			t.Fatalf("%s: malformed frame forwarded: % x", name, in)
		}
		if v == xdpPass {
			sameBytes(t, name+": passed frame", out, in)
		}
	}
	for _, p := range valid {
		frame := p.build(t)
		off := 14
		if p.vlan != 0 {
			off = 18
		}
		// Truncate anywhere inside the packet (Ethernet padding after it is not the packet);
		// the kernel refuses test frames shorter than an Ethernet header.
		for n := 14; n < off+len(l3(frame)); n++ {
			check("truncated", frame[:n])
		}
		if frame[off]>>4 == 4 {
			for ihl := 0; ihl < 5; ihl++ {
				f := append([]byte(nil), frame...)
				f[off] = 0x40 | byte(ihl)
				check("bogus ihl", f)
			}
			for _, tot := range []uint16{0, 10, 19, uint16(len(frame) - off + 1), 0xffff} {
				f := append([]byte(nil), frame...)
				binary.BigEndian.PutUint16(f[off+2:], tot)
				check("bogus total length", f)
			}
		} else {
			for _, pl := range []uint16{uint16(len(frame) - off - 40 + 1), 0xffff} {
				f := append([]byte(nil), frame...)
				binary.BigEndian.PutUint16(f[off+4:], pl)
				check("bogus payload length", f)
			}
		}
	}
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 3000; i++ {
		f := make([]byte, 14+r.Intn(200))
		r.Read(f)
		if len(f) > 14 && i%2 == 0 {
			f[12], f[13] = 0x08, 0x00 // claim IPv4 to reach deeper
			if len(f) > 34 {
				copy(f[30:34], netip.MustParseAddr(vip4).AsSlice())
			}
		}
		check("random", f)
	}
}

// TestVIPRemovalEndsFlows: removing a VIP stops its established flows at once (the entries'
// generation no longer matches), and a VIP re-added under the same id starts afresh.
func TestVIPRemovalEndsFlows(t *testing.T) {
	dp := newDataplane(t)
	dp.vip(0, vip4, 80, maps.TCP, 0, be4[0])
	syn := pkt{src: cli4, dst: vip4, sport: 999, dport: 80, proto: "tcp", flags: "S"}
	ack := syn
	ack.flags = "A"
	if v, _ := dp.run(syn.build(t)); v != xdpTX {
		t.Fatal("SYN not forwarded")
	}
	k := maps.VIPKey{Addr: netip.MustParseAddr(vip4), Port: 80, Proto: maps.TCP}
	if err := dp.s.DeleteVIP(k); err != nil {
		t.Fatal(err)
	}
	if v, out := dp.run(ack.build(t)); v != xdpPass || len(out) == 0 {
		t.Fatalf("established packet of a removed VIP: verdict %s, want PASS", verdictName[v])
	}
	// Same id, other backend: the old entry must not steer the flow.
	dp.vip(0, vip4, 80, maps.TCP, 0, be4[1])
	_, out := dp.run(ack.build(t))
	if got := decodeEncap(t, out).outerDst.String(); got != be4[1] {
		t.Fatalf("flow of the re-added VIP went to %s, want %s", got, be4[1])
	}
	// Re-putting the same VIP (same id) keeps established flows.
	dp.vip(0, vip4, 80, maps.TCP, 0, be4[2])
	_, out = dp.run(ack.build(t))
	if got := decodeEncap(t, out).outerDst.String(); got != be4[1] {
		t.Fatalf("re-putting the VIP moved an established flow to %s", got)
	}
}

// TestVIPCacheFollowsChanges: a VIP a CPU has cached (vip_cache) is not used once vips changed:
// a removed VIP's port passes, and a VIP put again under another id is balanced by its new ring.
// Pinned to one CPU, so every packet meets the same CPU's cache.
func TestVIPCacheFollowsChanges(t *testing.T) {
	pinThread(t, firstCPU(t))
	dp := newDataplane(t)
	dp.vip(0, vip4, 80, maps.TCP, 0, be4[0])
	dp.vip(1, vip4, 443, maps.TCP, 0, be4[1])
	syn := func(sport uint16) []byte {
		return pkt{src: cli4, dst: vip4, sport: sport, dport: 80, proto: "tcp", flags: "S"}.build(t)
	}
	for sport := uint16(1000); sport < 1003; sport++ {
		if v, out := dp.run(syn(sport)); v != xdpTX || decodeEncap(t, out).outerDst.String() != be4[0] {
			t.Fatalf("SYN to the VIP: verdict %s, want TX to %s", verdictName[v], be4[0])
		}
	}
	k := maps.VIPKey{Addr: netip.MustParseAddr(vip4), Port: 80, Proto: maps.TCP}
	if err := dp.s.DeleteVIP(k); err != nil {
		t.Fatal(err)
	}
	if v, _ := dp.run(syn(1003)); v != xdpPass {
		t.Fatalf("SYN to a removed VIP's port: verdict %s, want PASS", verdictName[v])
	}
	dp.vip(2, vip4, 80, maps.TCP, 0, be4[2])
	if v, out := dp.run(syn(1004)); v != xdpTX || decodeEncap(t, out).outerDst.String() != be4[2] {
		t.Fatalf("SYN to the VIP put again under id 2: verdict %s, want TX to %s", verdictName[v], be4[2])
	}
}

// TestDeleteFlowsPerVIP: the entries the program makes carry their VIP's id, so cutting one VIP's
// flows to a backend leaves that backend's flows of other VIPs alone (drain timeout of an address
// shared by two VIPs). The map API itself is tested in maps/ (TestFlows).
func TestDeleteFlowsPerVIP(t *testing.T) {
	dp := newDataplane(t)
	dp.vip(0, vip4, 80, maps.TCP, 0, be4[0])
	dp.vip(1, vip4, 443, maps.TCP, 0, be4[0])
	for sport := uint16(100); sport < 110; sport++ {
		for _, port := range []uint16{80, 443} {
			dp.run(pkt{src: cli4, dst: vip4, sport: sport, dport: port, proto: "tcp", flags: "S"}.build(t))
		}
	}
	n, err := dp.s.DeleteFlows(0, dp.backendID(be4[0]))
	if err != nil || n != 10 {
		t.Fatalf("deleted %d flows (%v), want 10", n, err)
	}
	flows, _ := dp.s.Flows()
	if len(flows) != 10 {
		t.Fatalf("%d flows left, want the other VIP's 10", len(flows))
	}
	for _, f := range flows {
		if f.VIPID != 1 || f.Dst.Port() != 443 {
			t.Fatalf("wrong flow left: %+v", f)
		}
	}
}
