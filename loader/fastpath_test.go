package loader_test

import (
	"encoding/binary"
	"testing"
)

// TestEstablishedPathsAgree: an established packet of an untagged IPv4 frame takes fast4 (bpf/lb.c),
// the same packet with an 802.1Q tag takes the general path; both must decide alike (verdict,
// counter) and, when they forward, write the same outer header (checksum, entropy source, TOS,
// length) around the same inner packet. The cases cover what fast4 forwards itself (IPIP, 4-in-6,
// UDP, a FIN) and what it must hand back (a length that does not fit, a frame over the MTU).
func TestEstablishedPathsAgree(t *testing.T) {
	dp := standard(t)
	badDoff := func(f []byte, vlan bool) []byte {
		o := 14 + 20 + 12
		if vlan {
			o += 4
		}
		f[o] = 15<<4 | f[o]&0x0f
		return f
	}
	cases := []struct {
		name    string
		first   pkt // creates the entry (untagged)
		p       pkt // the established packet, sent untagged and tagged
		edit    func(f []byte, vlan bool) []byte
		verdict uint32
		counter string
	}{
		{"tcp4 to an IPv4 backend", pkt{src: cli4, dst: vip4, sport: 41000, dport: 80, proto: "tcp", flags: "S"},
			pkt{src: cli4, dst: vip4, sport: 41000, dport: 80, proto: "tcp", flags: "A", tos: 0x28, payload: 100}, nil, xdpTX, "conntrack_hit"},
		{"tcp4 to an IPv6 backend (4in6)", pkt{src: cli4, dst: vip46, sport: 41001, dport: 443, proto: "tcp", flags: "S"},
			pkt{src: cli4, dst: vip46, sport: 41001, dport: 443, proto: "tcp", flags: "A", tos: 0x10, payload: 7}, nil, xdpTX, "conntrack_hit"},
		{"udp4", pkt{src: cli4, dst: vip4, sport: 41002, dport: 53, proto: "udp", payload: 30},
			pkt{src: cli4, dst: vip4, sport: 41002, dport: 53, proto: "udp", tos: 0xb8, payload: 9}, nil, xdpTX, "conntrack_hit"},
		{"tcp4 FIN", pkt{src: cli4, dst: vip4, sport: 41003, dport: 80, proto: "tcp", flags: "S"},
			pkt{src: cli4, dst: vip4, sport: 41003, dport: 80, proto: "tcp", flags: "FA"}, nil, xdpTX, "conntrack_hit"},
		{"tcp4 data offset past the payload", pkt{src: cli4, dst: vip4, sport: 41004, dport: 80, proto: "tcp", flags: "S"},
			pkt{src: cli4, dst: vip4, sport: 41004, dport: 80, proto: "tcp", flags: "A", payload: 8}, badDoff, xdpDrop, "drop_malformed"},
		{"tcp4 over the MTU", pkt{src: cli4, dst: vip4, sport: 41005, dport: 80, proto: "tcp", flags: "S"},
			pkt{src: cli4, dst: vip4, sport: 41005, dport: 80, proto: "tcp", flags: "A", df: true, payload: 1500 - 40}, nil, xdpTX, "icmp_toobig_sent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dp.t = t
			if v, _ := dp.run(c.first.build(t)); v != xdpTX {
				t.Fatalf("first packet: verdict %s", verdictName[v])
			}
			var outs [2][]byte
			for i, vlan := range []uint16{0, 42} {
				p := c.p
				p.vlan = vlan
				in := p.build(t)
				if c.edit != nil {
					in = c.edit(in, vlan != 0)
				}
				before := dp.counters()
				v, out := dp.run(in)
				if v != c.verdict {
					t.Fatalf("vlan %d: verdict %s, want %s", vlan, verdictName[v], verdictName[c.verdict])
				}
				if got := dp.counters()[c.counter].Packets - before[c.counter].Packets; got != 1 {
					t.Fatalf("vlan %d: counter %s grew by %d, want 1", vlan, c.counter, got)
				}
				outs[i] = out
			}
			if c.verdict != xdpTX || c.counter != "conntrack_hit" {
				return
			}
			u, g := outs[0], outs[1]
			sameBytes(t, "ethernet addresses", u[:12], g[:12])
			if binary.BigEndian.Uint16(g[12:]) != 0x8100 || binary.BigEndian.Uint16(g[16:]) != binary.BigEndian.Uint16(u[12:]) {
				t.Fatalf("ethertypes differ: % x / % x", u[12:14], g[12:18])
			}
			// The outer IP packet (header and inner packet) must be the same bytes.
			e := decodeEncap(t, u)
			n := len(e.inner) + 20
			if e.outerV6 {
				n = len(e.inner) + 40
			}
			sameBytes(t, "outer IP packet", u[14:14+n], g[18:18+n])
			sameBytes(t, "inner packet", e.inner, l3(c.p.build(t)))
		})
	}
}
