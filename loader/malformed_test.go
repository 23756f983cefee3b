package loader_test

import (
	"encoding/binary"
	"testing"

	"github.com/switchyard/switchyard/maps"
)

// TestMalformedLengths: a UDP datagram toward a VIP whose UDP length is 0, shorter than its
// header or longer than the IP payload, and a TCP segment whose data offset reaches past the IP
// payload, are dropped as drop_malformed (globally and in the VIP's drops), never forwarded. A
// UDP length shorter than the IP payload (trailing bytes) and an exact one are forwarded.
func TestMalformedLengths(t *testing.T) {
	dp := standard(t)
	dp.vip(6, vip6, 53, maps.UDP, 0, be6...)
	udp4 := pkt{src: cli4, dst: vip4, sport: 7, dport: 53, proto: "udp", payload: 8}
	udp6 := pkt{src: cli6, dst: vip6, sport: 7, dport: 53, proto: "udp", payload: 8}
	tcp4 := pkt{src: cli4, dst: vip4, sport: 7, dport: 80, proto: "tcp", flags: "S", payload: 8}
	tcp6 := pkt{src: cli6, dst: vip6, sport: 7, dport: 80, proto: "tcp", flags: "S", payload: 8}
	// udpLen rewrites the UDP length; doff the TCP data offset (in 32-bit words).
	udpLen := func(p pkt, n uint16) []byte {
		f := p.build(t)
		binary.BigEndian.PutUint16(f[14+ipHdrLen(f)+4:], n)
		return f
	}
	doff := func(p pkt, words byte) []byte {
		f := p.build(t)
		o := 14 + ipHdrLen(f) + 12
		f[o] = words<<4 | f[o]&0x0f
		return f
	}
	// The IP payloads: UDP 8 + 8 = 16 bytes, TCP 20 + 8 = 28 bytes.
	cases := []struct {
		name    string
		frame   []byte
		vipID   uint32
		verdict uint32
	}{
		{"udp4 length 0", udpLen(udp4, 0), 1, xdpDrop},
		{"udp4 length 7", udpLen(udp4, 7), 1, xdpDrop},
		{"udp4 length past the ip payload", udpLen(udp4, 17), 1, xdpDrop},
		{"udp4 length 0xffff", udpLen(udp4, 0xffff), 1, xdpDrop},
		{"udp6 length 0", udpLen(udp6, 0), 6, xdpDrop},
		{"udp6 length past the ip payload", udpLen(udp6, 17), 6, xdpDrop},
		{"tcp4 data offset past the ip payload", doff(tcp4, 8), 0, xdpDrop},
		{"tcp4 data offset 15", doff(tcp4, 15), 0, xdpDrop},
		{"tcp6 data offset past the ip payload", doff(tcp6, 8), 2, xdpDrop},
		{"udp4 exact length", udpLen(udp4, 16), 1, xdpTX},
		{"udp4 length short of the ip payload", udpLen(udp4, 12), 1, xdpTX},
		{"udp6 exact length", udpLen(udp6, 16), 6, xdpTX},
		{"tcp4 data offset 7 (the whole payload)", doff(tcp4, 7), 0, xdpTX},
		{"tcp6 data offset 7 (the whole payload)", doff(tcp6, 7), 2, xdpTX},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := dp.counters()
			vb := dp.vipDrops(c.vipID)
			in := append([]byte(nil), c.frame...)
			v, _ := dp.run(c.frame)
			if v != c.verdict {
				t.Fatalf("verdict %s, want %s: % x", verdictName[v], verdictName[c.verdict], in)
			}
			after := dp.counters()
			want := uint64(0)
			if c.verdict == xdpDrop {
				want = 1
			}
			if got := after["drop_malformed"].Packets - before["drop_malformed"].Packets; got != want {
				t.Fatalf("drop_malformed grew by %d, want %d", got, want)
			}
			if got := after["drop"].Packets - before["drop"].Packets; got != want {
				t.Fatalf("drop grew by %d, want %d", got, want)
			}
			if got := dp.vipDrops(c.vipID) - vb; got != want {
				t.Fatalf("drops of vip %d grew by %d, want %d", c.vipID, got, want)
			}
		})
	}
}

// ipHdrLen is the IP header length of an untagged frame.
func ipHdrLen(f []byte) int {
	if f[14]>>4 == 4 {
		return int(f[14]&0x0f) * 4
	}
	return 40
}

// vipDrops is the number of packets toward the VIP that were dropped.
func (dp *dataplane) vipDrops(id uint32) uint64 {
	dp.t.Helper()
	c, err := dp.s.VIPDrops(id)
	if err != nil {
		dp.t.Fatal(err)
	}
	return c.Packets
}

// TestVIPDrops: drops toward a known VIP count in that VIP's drops (here: no backend), and a
// VIP's drops are zeroed with its stats when its id is given to a new VIP.
func TestVIPDrops(t *testing.T) {
	dp := standard(t)
	syn := pkt{src: cli4, dst: vipNB, sport: 7, dport: 80, proto: "tcp", flags: "S"}.build(t)
	before := dp.counters()
	for i := 0; i < 3; i++ {
		if v, _ := dp.run(syn); v != xdpDrop {
			t.Fatalf("SYN to a VIP without backends: verdict %s, want DROP", verdictName[v])
		}
	}
	if got := dp.counters()["drop_no_backend"].Packets - before["drop_no_backend"].Packets; got != 3 {
		t.Fatalf("drop_no_backend grew by %d, want 3", got)
	}
	if got := dp.vipDrops(5); got != 3 {
		t.Fatalf("drops of the VIP without backends: %d, want 3", got)
	}
	if got := dp.vipDrops(0); got != 0 {
		t.Fatalf("drops of another VIP: %d, want 0", got)
	}
	if err := dp.s.ResetVIPStats(5); err != nil {
		t.Fatal(err)
	}
	if got := dp.vipDrops(5); got != 0 {
		t.Fatalf("drops after the reset: %d, want 0", got)
	}
}
