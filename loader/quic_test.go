package loader_test

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/maps"
)

// QUIC routing by connection ID (bpf/include/quic.h): packet tests through BPF_PROG_TEST_RUN.

// katranCID is an 8-byte connection ID of Katran's scheme: version bits, then the server ID.
func katranCID(version uint8, sid uint32) []byte {
	c := []byte{0, 0x5a, 0x5b, 0x5c, 0x5d, 0x5e, 0x5f, 0x60}
	switch version {
	case 1:
		c[0] = 1<<6 | byte(sid>>10)&0x3f
		c[1] = byte(sid >> 2)
		c[2] = byte(sid<<6) | c[2]&0x3f
	case 2:
		c[0] = 2 << 6
		c[1], c[2], c[3] = byte(sid>>16), byte(sid>>8), byte(sid)
	case 3:
		c[0] = 3 << 6
		binary.BigEndian.PutUint32(c[1:], sid)
	}
	return c
}

// quicLBCID is a QUIC-LB plaintext connection ID: rotation bits, a server ID of n bytes, a nonce.
func quicLBCID(cr uint8, sid uint32, n int) []byte {
	c := []byte{cr<<5 | 0x11}
	for i := n - 1; i >= 0; i-- {
		c = append(c, byte(sid>>(8*i)))
	}
	return append(c, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6)
}

// shortHeader is a 1-RTT packet to the connection ID dcid, with some protected payload.
func shortHeader(dcid []byte) []byte {
	b := append([]byte{0x43}, dcid...)
	return append(b, make([]byte, 40)...)
}

// longHeader is a long-header packet of the given type (0 Initial, 1 0-RTT, 2 Handshake) of
// QUIC version 1 to dcid.
func longHeader(typ uint8, dcid []byte) []byte {
	b := []byte{0xc0 | typ<<4, 0, 0, 0, 1, byte(len(dcid))}
	b = append(b, dcid...)
	b = append(b, 4, 1, 2, 3, 4) // source connection ID
	return append(b, make([]byte, 60)...)
}

const quicPort = 443

// quicDataplane loads the forwarder with one QUIC VIP (id 1, udp/443) over be4, whose backends
// have the given server IDs.
func quicDataplane(t *testing.T, flags maps.VIPFlags, sids ...uint32) *dataplane {
	dp := newDataplane(t)
	dp.vip(1, vip4, quicPort, maps.UDP, flags, be4...)
	dp.vip(2, vip6, quicPort, maps.UDP, flags, be6...)
	want := map[uint32]uint32{}
	for i, sid := range sids {
		want[sid] = dp.backendID(be4[i])
	}
	if err := dp.s.SetQUICServers(want); err != nil {
		t.Fatal(err)
	}
	return dp
}

// sendQUIC sends one UDP datagram with payload to the VIP and returns the backend it went to.
func sendQUIC(t *testing.T, dp *dataplane, src, dst string, sport uint16, payload []byte) string {
	t.Helper()
	p := pkt{src: src, dst: dst, sport: sport, dport: quicPort, proto: "udp", icmpBody: payload}
	v, out := dp.run(p.build(t))
	if v != xdpTX {
		t.Fatalf("verdict %s, want TX", verdictName[v])
	}
	return decodeEncap(t, out).outerDst.String()
}

// clientsOff returns n client 4-tuples (address, port) whose Maglev pick is not want, so that a
// packet that reaches want got there by its connection ID.
func clientsOff(t *testing.T, dp *dataplane, vipID uint32, dst, want string, n int) []pkt {
	return clientsOffFrom(t, dp, vipID, dst, want, n, 0)
}

// clientsOffFrom is clientsOff from the first-th candidate tuple on (fresh tuples: no entries).
func clientsOffFrom(t *testing.T, dp *dataplane, vipID uint32, dst, want string, n, first int) []pkt {
	var out []pkt
	for i := first; len(out) < n && i < first+10000; i++ {
		p := pkt{src: fmt.Sprintf("198.18.%d.%d", 1+i/200, 10+i%200), dst: dst, sport: uint16(40000 + i), dport: quicPort, proto: "udp"}
		if dp.expectBackend(vipID, 0, p.flow()).String() != want {
			out = append(out, p)
		}
	}
	if len(out) < n {
		t.Fatalf("found %d clients off %s", len(out), want)
	}
	return out
}

// TestQUICShortHeaderByServerID: a short-header packet whose CID carries a backend's server ID
// goes to that backend from any client address and port (connection migration), in both schemes
// and every ID length, and keeps going there after the ring changes (another backend added, the
// backend drained).
func TestQUICShortHeaderByServerID(t *testing.T) {
	cases := []struct {
		name  string
		flags func(t *testing.T) maps.VIPFlags
		sid   uint32
		cid   []byte
	}{
		{"katran-v1", quicKatranFlags, 0x1234, katranCID(1, 0x1234)},
		{"katran-v2", quicKatranFlags, 0xabcdef, katranCID(2, 0xabcdef)},
		{"katran-v3", quicKatranFlags, 0xfedcba98, katranCID(3, 0xfedcba98)},
		{"quic-lb-1", lbFlags(1, 0), 0x7e, quicLBCID(0, 0x7e, 1)},
		{"quic-lb-2", lbFlags(2, 3), 0x0102, quicLBCID(3, 0x0102, 2)},
		{"quic-lb-3", lbFlags(3, 6), 0x00a0b0, quicLBCID(6, 0x00a0b0, 3)},
		{"quic-lb-4", lbFlags(4, 1), 0x00000000, quicLBCID(1, 0, 4)},
	}
	dp := quicDataplane(t, 0) // one forwarder for every case: loading is most of the time
	for k, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dp.t = t // its Fatal calls must come from this subtest
			dp.vip(1, vip4, quicPort, maps.UDP, c.flags(t), be4...)
			sids := map[uint32]uint32{c.sid + 1: dp.backendID(be4[0]), c.sid: dp.backendID(be4[1]), c.sid + 2: dp.backendID(be4[2])}
			if err := dp.s.SetQUICServers(sids); err != nil { // be4[1] carries c.sid
				t.Fatal(err)
			}
			if err := dp.s.ResetCounters(); err != nil {
				t.Fatal(err)
			}
			want := be4[1]
			for _, cl := range clientsOffFrom(t, dp, 1, vip4, want, 16, 1000*k) { // fresh tuples
				if got := sendQUIC(t, dp, cl.src, vip4, cl.sport, shortHeader(c.cid)); got != want {
					t.Fatalf("client %s:%d: short header to %s, want %s (its server ID)", cl.src, cl.sport, got, want)
				}
			}
			// A backend added and the owner drained: the ring no longer holds it, the ID does.
			dp.ring(1, []maglev.Backend{{ID: dp.backendID(be4[0]), Identity: be4[0], Weight: 1},
				{ID: dp.backendID(be4[1]), Identity: be4[1], Weight: 0}, {ID: dp.backendID(be4[2]), Identity: be4[2], Weight: 1},
				{ID: dp.backendID("198.18.3.9"), Identity: "198.18.3.9", Weight: 1}})
			for i := 0; i < 16; i++ {
				if got := sendQUIC(t, dp, cli4, vip4, uint16(50000+100*k+i), shortHeader(c.cid)); got != want {
					t.Fatalf("after the ring change: short header to %s, want %s", got, want)
				}
			}
			if got := dp.counters()["quic_cid_routed"].Packets; got != 32 {
				t.Fatalf("quic_cid_routed = %d, want 32", got)
			}
		})
	}
}

func quicKatranFlags(*testing.T) maps.VIPFlags { return maps.QUICKatran }

func lbFlags(n, cr int) func(t *testing.T) maps.VIPFlags {
	return func(t *testing.T) maps.VIPFlags {
		f, err := maps.QUICLBFlags(n, cr)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
}

// TestQUICLongHeader: an Initial whose client-chosen CID names no backend takes the Maglev path
// (and its next packets the connection table); a Handshake packet to the server's CID goes by
// its server ID; IPv6 too.
func TestQUICLongHeader(t *testing.T) {
	dp := quicDataplane(t, maps.QUICKatran, 11, 12, 13)
	random := []byte{0x7f, 0x3a, 0x91, 0x02, 0xee, 0x10, 0x55, 0x42} // version 1, server ID 0xfce4: unknown
	for _, cl := range clientsOff(t, dp, 1, vip4, be4[2], 8) {
		want := dp.expectBackend(1, 0, cl.flow()).String()
		if got := sendQUIC(t, dp, cl.src, vip4, cl.sport, longHeader(0, random)); got != want {
			t.Fatalf("Initial to %s, want the Maglev pick %s", got, want)
		}
		if got := sendQUIC(t, dp, cl.src, vip4, cl.sport, longHeader(1, random)); got != want {
			t.Fatalf("0-RTT to %s, want the Initial's backend %s", got, want)
		}
		// The Initial's backend answers with a CID of its own server ID (11, 12 or 13).
		sid := uint32(11 + slices.Index(be4, want))
		if got := sendQUIC(t, dp, cl.src, vip4, cl.sport, longHeader(2, katranCID(1, sid))); got != want {
			t.Fatalf("Handshake to %s, want %s (server ID %d)", got, want, sid)
		}
	}
	c := dp.counters()
	if c["quic_initial_fallback"].Packets != 8 || c["quic_cid_routed"].Packets != 0 {
		// The 0-RTT and Handshake packets of each client hit the Initial's table entry.
		t.Fatalf("counters: initial %d routed %d, want 8 and 0", c["quic_initial_fallback"].Packets, c["quic_cid_routed"].Packets)
	}
	// From new 4-tuples, a Handshake goes by its ID (no table entry).
	for i := 0; i < 8; i++ {
		if got := sendQUIC(t, dp, cli4, vip4, uint16(60000+i), longHeader(2, katranCID(1, 12))); got != be4[1] {
			t.Fatalf("Handshake to %s, want %s", got, be4[1])
		}
	}
	if err := dp.s.SetQUICServers(map[uint32]uint32{21: dp.backendID(be6[1])}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if got := sendQUIC(t, dp, cli6, vip6, uint16(61000+i), shortHeader(katranCID(2, 21))); got != be6[1] {
			t.Fatalf("IPv6 short header to %s, want %s", got, be6[1])
		}
	}
}

// TestQUICFallback: whatever holds no usable server ID takes the Maglev path, never an error and
// never a read past the UDP payload: empty and truncated headers, a CID too short, bytes that sit
// in Ethernet padding, unknown or unroutable rotation bits, an ID no backend has, Katran's
// version 0, and a VIP without QUIC.
func TestQUICFallback(t *testing.T) {
	lb2, err := maps.QUICLBFlags(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	known := quicLBCID(1, 0x0202, 2)
	cases := []struct {
		name    string
		flags   maps.VIPFlags
		payload []byte
		pad     []byte // appended to the frame after the IP packet
		counter string
	}{
		{"empty", lb2, []byte{}, nil, "quic_no_server_id_fallback"},
		{"flags only", lb2, []byte{0x40}, known, "quic_no_server_id_fallback"},
		{"short cid", lb2, []byte{0x40, known[0], known[1]}, nil, "quic_no_server_id_fallback"},
		{"long truncated", lb2, []byte{0xe0, 0, 0, 0}, nil, "quic_no_server_id_fallback"},
		{"long dcid len lies", lb2, []byte{0xe0, 0, 0, 0, 1, 20, known[0], known[1]}, known, "quic_no_server_id_fallback"},
		{"long dcid too short", lb2, append([]byte{0xe0, 0, 0, 0, 1, 2}, known[:2]...), nil, "quic_no_server_id_fallback"},
		{"rotation unknown", lb2, shortHeader(quicLBCID(2, 0x0202, 2)), nil, "quic_no_server_id_fallback"},
		{"rotation unroutable", lb2, shortHeader(quicLBCID(7, 0x0202, 2)), nil, "quic_no_server_id_fallback"},
		{"id unknown", lb2, shortHeader(quicLBCID(1, 0x0999, 2)), nil, "quic_cid_unknown_fallback"},
		{"katran v0", maps.QUICKatran, shortHeader(katranCID(0, 0)), nil, "quic_no_server_id_fallback"},
		{"katran short", maps.QUICKatran, append([]byte{0x40}, katranCID(2, 0x0202)[:5]...), nil, "quic_no_server_id_fallback"},
		{"not a quic vip", 0, shortHeader(known), nil, ""},
	}
	dps := map[maps.VIPFlags]*dataplane{} // one forwarder a flag set: loading is most of the time
	for _, c := range cases {
		if dps[c.flags] == nil {
			dps[c.flags] = quicDataplane(t, c.flags, 0x0101, 0x0202, 0x0303)
		}
	}
	for k, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dp := dps[c.flags]
			dp.t = t // its Fatal calls must come from this subtest
			if err := dp.s.ResetCounters(); err != nil {
				t.Fatal(err)
			}
			for _, cl := range clientsOffFrom(t, dp, 1, vip4, be4[1], 8, 1000*k) {
				cl.icmpBody = c.payload
				frame := append(cl.build(t), c.pad...)
				v, out := dp.run(frame)
				if v != xdpTX {
					t.Fatalf("verdict %s, want TX", verdictName[v])
				}
				want := dp.expectBackend(1, 0, cl.flow()).String()
				if got := decodeEncap(t, out).outerDst.String(); got != want {
					t.Fatalf("to %s, want the Maglev pick %s", got, want)
				}
			}
			cs := dp.counters()
			if cs["quic_cid_routed"].Packets != 0 {
				t.Fatalf("quic_cid_routed = %d", cs["quic_cid_routed"].Packets)
			}
			if c.counter != "" && cs[c.counter].Packets != 8 {
				t.Fatalf("%s = %d, want 8", c.counter, cs[c.counter].Packets)
			}
		})
	}
}

// TestQUICServerGone: an ID whose backend slot was emptied falls back to the ring.
func TestQUICServerGone(t *testing.T) {
	dp := quicDataplane(t, maps.QUICKatran, 1, 2, 3)
	if err := dp.s.DeleteBackend(dp.backendID(be4[1])); err != nil {
		t.Fatal(err)
	}
	dp.ring(1, []maglev.Backend{{ID: dp.backendID(be4[0]), Identity: be4[0], Weight: 1}, {ID: dp.backendID(be4[2]), Identity: be4[2], Weight: 1}})
	for i := 0; i < 16; i++ {
		if got := sendQUIC(t, dp, cli4, vip4, uint16(30000+i), shortHeader(katranCID(1, 2))); got == be4[1] {
			t.Fatal("packet reached a removed backend")
		}
	}
	if got := dp.counters()["quic_cid_unknown_fallback"].Packets; got != 16 {
		t.Fatalf("quic_cid_unknown_fallback = %d, want 16", got)
	}
}

// refServerID is an independent reading of the server ID of a QUIC datagram payload (the
// schemes as docs/xdp.md states them), for TestQUICRandomPayloads.
func refServerID(b []byte, katran bool, n, cr int) (uint32, bool) {
	if len(b) < 1 {
		return 0, false
	}
	need := 1 + n
	if katran {
		need = 8
	}
	cid := b[1:]
	if b[0]&0x80 != 0 {
		if len(b) < 6 || int(b[5]) < need {
			return 0, false
		}
		cid = b[6:]
	}
	if len(cid) < need {
		return 0, false
	}
	var sid uint32
	if !katran {
		if int(cid[0]>>5) != cr {
			return 0, false
		}
		for _, x := range cid[1 : 1+n] {
			sid = sid<<8 | uint32(x)
		}
		return sid, true
	}
	switch cid[0] >> 6 {
	case 1:
		sid = uint32(cid[0]&0x3f)<<10 | uint32(cid[1])<<2 | uint32(cid[2])>>6
	case 2:
		sid = uint32(cid[1])<<16 | uint32(cid[2])<<8 | uint32(cid[3])
	case 3:
		sid = binary.BigEndian.Uint32(cid[1:5])
	}
	return sid, sid != 0
}

// TestQUICRandomPayloads: random datagrams, half of them built around a known connection ID and
// cut at a random length, each from a fresh tuple: every one is forwarded, to the backend its
// server ID names when the reference reading finds a known one, else to the Maglev pick.
func TestQUICRandomPayloads(t *testing.T) {
	lb1, err := maps.QUICLBFlags(1, 5)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(7))
	for _, c := range []struct {
		name   string
		flags  maps.VIPFlags
		katran bool
		n, cr  int
		sids   []uint32
		cid    func(sid uint32) []byte
	}{
		{"katran", maps.QUICKatran, true, 0, 0, []uint32{0x101, 0x20202, 0x3030303}, func(sid uint32) []byte { return katranCID(uint8(1+r.Intn(3)), sid) }},
		{"quic-lb", lb1, false, 1, 5, []uint32{1, 2, 3}, func(sid uint32) []byte { return quicLBCID(5, sid, 1) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dp := quicDataplane(t, c.flags, c.sids...)
			known := map[uint32]string{c.sids[0]: be4[0], c.sids[1]: be4[1], c.sids[2]: be4[2]}
			routed := uint64(0)
			for i := 0; i < 1500; i++ {
				var b []byte
				if i%2 == 0 {
					sid := c.sids[r.Intn(3)]
					if c.katran && r.Intn(2) == 0 {
						sid = uint32(r.Intn(1 << 16)) // v1 reads 16 bits
					}
					if r.Intn(2) == 0 {
						b = shortHeader(c.cid(sid))
					} else {
						b = longHeader(uint8(r.Intn(4)), c.cid(sid))
					}
					b = b[:r.Intn(len(b)+1)]
				} else {
					b = make([]byte, r.Intn(30))
					r.Read(b)
				}
				cl := pkt{src: fmt.Sprintf("198.18.%d.%d", 1+i/200, 10+i%200), dst: vip4, sport: uint16(20000 + i), dport: quicPort, proto: "udp", icmpBody: b}
				want := dp.expectBackend(1, 0, cl.flow()).String()
				if sid, ok := refServerID(b, c.katran, c.n, c.cr); ok && known[sid] != "" {
					want = known[sid]
					routed++
				}
				v, out := dp.run(cl.build(t))
				if v != xdpTX {
					t.Fatalf("payload % x: verdict %s", b, verdictName[v])
				}
				if got := decodeEncap(t, out).outerDst.String(); got != want {
					t.Fatalf("payload % x: to %s, want %s", b, got, want)
				}
			}
			if got := dp.counters()["quic_cid_routed"].Packets; got != routed || routed < 200 {
				t.Fatalf("quic_cid_routed = %d, the reference found %d (want at least 200)", got, routed)
			}
		})
	}
}
