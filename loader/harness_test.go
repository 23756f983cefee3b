package loader_test

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// XDP verdicts.
const (
	xdpAborted = 0
	xdpDrop    = 1
	xdpPass    = 2
	xdpTX      = 3
)

var verdictName = map[uint32]string{0: "ABORTED", 1: "DROP", 2: "PASS", 3: "TX"}

var (
	clientMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	lbMAC      = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	nextHopMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}
	src4Base   = netip.MustParseAddr("172.16.0.0")
	src6Base   = netip.MustParseAddr("fd00:5e::")
)

const testRing = 251 // a small prime keeps ring writes fast in tests

// dataplane is a loaded forwarder with its maps, for BPF_PROG_TEST_RUN tests.
type dataplane struct {
	t        testing.TB
	f        *loader.Forwarder
	s        *maps.Set
	be       map[uint32]netip.Addr
	ringSize uint32 // Maglev ring size
}

func newDataplane(t testing.TB) *dataplane {
	return newDataplaneOpts(t, loader.Options{RingSize: testRing, MaxVIPs: 8, MaxBackends: 64, ConnTableSize: 4096})
}

// newDataplaneOpts loads the forwarder with the given sizes (the benchmark's are larger).
func newDataplaneOpts(t testing.TB, opts loader.Options) *dataplane {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireKernel(t, testutil.XDP)
	f, err := loader.LoadForwarder(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s, err := maps.New(&f.Objs.LBMaps, opts.RingSize)
	if err != nil {
		t.Fatal(err)
	}
	dp := &dataplane{t: t, f: f, s: s, be: map[uint32]netip.Addr{}, ringSize: opts.RingSize}
	dp.config(func(c *maps.Config) {})
	return dp
}

func (dp *dataplane) config(mod func(*maps.Config)) {
	c := maps.Config{IfMAC: lbMAC, NextHopMAC: nextHopMAC, MTU: 1500, Src4: src4Base, Src4HashBits: 16,
		Src6: src6Base, UDPTimeout: 30 * time.Second, ICMPTooBig: true}
	mod(&c)
	if err := dp.s.SetConfig(c); err != nil {
		dp.t.Fatal(err)
	}
}

// vip adds a VIP whose ring holds the given backends (ids from 1 in the order given).
func (dp *dataplane) vip(id uint32, addr string, port uint16, proto maps.Proto, flags maps.VIPFlags, backends ...string) {
	dp.t.Helper()
	k := maps.VIPKey{Addr: netip.MustParseAddr(addr), Port: port, Proto: proto}
	if err := dp.s.PutVIP(maps.VIP{Key: k, ID: id, Flags: flags}); err != nil {
		dp.t.Fatal(err)
	}
	var mb []maglev.Backend
	for _, b := range backends {
		bid := dp.backendID(b)
		mb = append(mb, maglev.Backend{ID: bid, Identity: b, Weight: 1})
	}
	dp.ring(id, mb)
}

func (dp *dataplane) backendID(addr string) uint32 {
	a := netip.MustParseAddr(addr)
	for id, x := range dp.be {
		if x == a {
			return id
		}
	}
	id := uint32(len(dp.be) + 1)
	if err := dp.s.PutBackend(maps.Backend{ID: id, Addr: a}); err != nil {
		dp.t.Fatal(err)
	}
	dp.be[id] = a
	return id
}

func (dp *dataplane) ring(vipID uint32, mb []maglev.Backend) []uint32 {
	table, err := maglev.Build(mb, uint64(dp.ringSize))
	if err != nil {
		dp.t.Fatal(err)
	}
	old, err := dp.s.Ring(vipID)
	if err != nil {
		dp.t.Fatal(err)
	}
	if _, err := dp.s.WriteRing(vipID, old, table); err != nil {
		dp.t.Fatal(err)
	}
	return table
}

// run sends one frame through xdp_lb.
func (dp *dataplane) run(frame []byte) (uint32, []byte) {
	dp.t.Helper()
	out := make([]byte, len(frame)+512)
	opts := ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := dp.f.Objs.XdpLb.Run(&opts)
	if err != nil {
		dp.t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

func (dp *dataplane) counters() map[string]maps.Counter {
	c, err := dp.s.Counters()
	if err != nil {
		dp.t.Fatal(err)
	}
	return c
}

// expectBackend is the backend the Go replica of the hash picks from the ring for a new flow.
func (dp *dataplane) expectBackend(vipID uint32, flags maps.VIPFlags, f maps.Flow) netip.Addr {
	ring, err := dp.s.Ring(vipID)
	if err != nil {
		dp.t.Fatal(err)
	}
	return dp.be[ring[maps.Slot(f, flags, testRing)]]
}

// ---- frame building ----

type pkt struct {
	src, dst     string
	sport, dport uint16
	proto        string // tcp, udp, icmp
	flags        string // S, A, F, R combos for TCP
	tos          uint8
	payload      int
	df           bool
	vlan         uint16
	ipOpts       bool
	fragOff      uint16 // IPv4 fragment offset (8-byte units) or, for IPv6, adds a fragment header when non-zero
	mf           bool
	icmpType     uint8
	icmpCode     uint8
	icmpBody     []byte
}

func (p pkt) build(t testing.TB) []byte {
	t.Helper()
	src, dst := netip.MustParseAddr(p.src), netip.MustParseAddr(p.dst)
	var ls []gopacket.SerializableLayer
	eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: lbMAC}
	ls = append(ls, eth)
	var etype layers.EthernetType
	var ipProto layers.IPProtocol
	switch p.proto {
	case "tcp":
		ipProto = layers.IPProtocolTCP
	case "udp":
		ipProto = layers.IPProtocolUDP
	case "icmp":
		if src.Is4() {
			ipProto = layers.IPProtocolICMPv4
		} else {
			ipProto = layers.IPProtocolICMPv6
		}
	case "gre":
		ipProto = layers.IPProtocolGRE
	}
	var netl gopacket.NetworkLayer
	if src.Is4() {
		etype = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, IHL: 5, TOS: p.tos, TTL: 61, Protocol: ipProto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Id: 0x1234, FragOffset: p.fragOff}
		if p.df {
			ip.Flags |= layers.IPv4DontFragment
		}
		if p.mf {
			ip.Flags |= layers.IPv4MoreFragments
		}
		if p.ipOpts {
			ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
		}
		netl = ip
		ls = append(ls, ip)
	} else {
		etype = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, TrafficClass: p.tos, HopLimit: 61, NextHeader: ipProto, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		netl = ip6
		ls = append(ls, ip6)
		if p.fragOff != 0 || p.mf {
			ip6.NextHeader = layers.IPProtocolIPv6Fragment
			fh := []byte{byte(ipProto), 0, 0, 0, 0, 0, 0, 7}
			fo := p.fragOff << 3
			if p.mf {
				fo |= 1
			}
			binary.BigEndian.PutUint16(fh[2:], fo)
			ls = append(ls, gopacket.Payload(fh))
		}
	}
	if p.vlan != 0 {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append([]gopacket.SerializableLayer{eth, &layers.Dot1Q{VLANIdentifier: p.vlan, Type: etype}}, ls[1:]...)
	} else {
		eth.EthernetType = etype
	}
	switch p.proto {
	case "tcp":
		tcp := &layers.TCP{SrcPort: layers.TCPPort(p.sport), DstPort: layers.TCPPort(p.dport), Seq: 1000, Window: 65535}
		for _, c := range p.flags {
			switch c {
			case 'S':
				tcp.SYN = true
			case 'A':
				tcp.ACK = true
			case 'F':
				tcp.FIN = true
			case 'R':
				tcp.RST = true
			}
		}
		_ = tcp.SetNetworkLayerForChecksum(netl)
		ls = append(ls, tcp)
	case "udp":
		udp := &layers.UDP{SrcPort: layers.UDPPort(p.sport), DstPort: layers.UDPPort(p.dport)}
		_ = udp.SetNetworkLayerForChecksum(netl)
		ls = append(ls, udp)
	case "icmp":
		if src.Is4() {
			ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(p.icmpType, p.icmpCode), Id: 9, Seq: 1})
		} else {
			ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(p.icmpType, p.icmpCode)}
			_ = ic.SetNetworkLayerForChecksum(netl)
			ls = append(ls, ic)
		}
	}
	body := p.icmpBody
	if body == nil {
		body = make([]byte, p.payload)
		for i := range body {
			body[i] = byte(i * 7)
		}
	}
	ls = append(ls, gopacket.Payload(body))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func (p pkt) flow() maps.Flow {
	pr := maps.TCP
	if p.proto == "udp" {
		pr = maps.UDP
	}
	return maps.Flow{Src: netip.AddrPortFrom(netip.MustParseAddr(p.src), p.sport), Dst: netip.AddrPortFrom(netip.MustParseAddr(p.dst), p.dport), Proto: pr}
}

// ---- checking outputs ----

// csum is the Internet checksum of b (zero when b carries a correct checksum).
func csum(b []byte, initial uint32) uint16 {
	s := initial
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// pseudo6 is the IPv6 pseudo-header partial sum.
func pseudo6(src, dst []byte, length int, next uint8) uint32 {
	var s uint32
	for i := 0; i < 16; i += 2 {
		s += uint32(binary.BigEndian.Uint16(src[i:])) + uint32(binary.BigEndian.Uint16(dst[i:]))
	}
	return s + uint32(length) + uint32(next)
}

// encapsulated is a decoded encapsulated frame.
type encapsulated struct {
	ethDst, ethSrc net.HardwareAddr
	vlan           uint16
	outerV6        bool
	outerSrc       netip.Addr
	outerDst       netip.Addr
	outerProto     uint8
	ttl            uint8
	tos            uint8
	inner          []byte
}

// decodeEncap parses an encapsulated frame by hand (independent of the program's code) and
// checks the outer IPv4 checksum.
func decodeEncap(t testing.TB, b []byte) encapsulated {
	t.Helper()
	var e encapsulated
	if len(b) < 14 {
		t.Fatalf("frame too short: %d", len(b))
	}
	e.ethDst, e.ethSrc = b[0:6], b[6:12]
	et := binary.BigEndian.Uint16(b[12:])
	off := 14
	if et == 0x8100 {
		e.vlan = binary.BigEndian.Uint16(b[14:]) & 0xfff
		et = binary.BigEndian.Uint16(b[16:])
		off = 18
	}
	ip := b[off:]
	switch et {
	case 0x0800:
		if ip[0] != 0x45 {
			t.Fatalf("outer ipv4 version/ihl %#x", ip[0])
		}
		if csum(ip[:20], 0) != 0 {
			t.Fatalf("outer ipv4 checksum invalid")
		}
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		e.tos, e.ttl, e.outerProto = ip[1], ip[8], ip[9]
		e.outerSrc, _ = netip.AddrFromSlice(ip[12:16])
		e.outerDst, _ = netip.AddrFromSlice(ip[16:20])
		e.inner = ip[20:tot]
	case 0x86dd:
		e.outerV6 = true
		e.tos = ip[0]<<4 | ip[1]>>4
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		e.outerProto, e.ttl = ip[6], ip[7]
		e.outerSrc, _ = netip.AddrFromSlice(ip[8:24])
		e.outerDst, _ = netip.AddrFromSlice(ip[24:40])
		e.inner = ip[40 : 40+plen]
	default:
		t.Fatalf("outer ethertype %#x", et)
	}
	return e
}

// l3 returns the IP packet of a frame, without Ethernet padding.
func l3(frame []byte) []byte {
	ip := frame[14:]
	if binary.BigEndian.Uint16(frame[12:]) == 0x8100 {
		ip = frame[18:]
	}
	if ip[0]>>4 == 4 {
		return ip[:binary.BigEndian.Uint16(ip[2:])]
	}
	return ip[:40+int(binary.BigEndian.Uint16(ip[4:]))]
}

func sameBytes(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs:\n got  % x\n want % x", what, got, want)
	}
}
