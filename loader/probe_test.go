package loader_test

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// TC verdicts.
const (
	tcNext = 0xffffffff // TC_ACT_UNSPEC, TCX_NEXT
	tcOK   = 0
	tcShot = 2
)

// probeRig is the probe encapsulator loaded beside a forwarder whose frame config it shares.
type probeRig struct {
	t  *testing.T
	dp *dataplane
	p  *loader.ProbeEncap
}

func newProbeRig(t *testing.T, targets map[uint32]netip.Addr) *probeRig {
	dp := newDataplane(t)
	p, err := loader.OpenProbeEncap(dp.f.Objs.Config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if err := p.SetTargets(targets); err != nil {
		t.Fatal(err)
	}
	return &probeRig{t: t, dp: dp, p: p}
}

// run sends one frame through tc_probe_encap as a packet of a socket with this mark.
func (r *probeRig) run(frame []byte, mark uint32) (uint32, []byte) {
	r.t.Helper()
	// struct __sk_buff up to mark: len and pkt_type must be zero in a test run's context.
	ctx := make([]byte, 12)
	binary.LittleEndian.PutUint32(ctx[8:], mark)
	out := make([]byte, len(frame)+128)
	opts := ebpf.RunOptions{Data: frame, DataOut: out, Context: ctx}
	ret, err := r.p.Objs.TcProbeEncap.Run(&opts)
	if err != nil {
		r.t.Fatalf("test run: %v", err)
	}
	return ret, opts.DataOut
}

func (r *probeRig) counters() map[string]bpfobj.LBCounter {
	c, err := r.p.Counters()
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// TestProbeEncap: a marked probe leaves wrapped toward its backend exactly as the forwarder wraps
// real traffic (next-hop MAC, outer source from the encap ranges, TTL 64, TOS kept, a correct
// outer checksum, the inner packet byte for byte); packets without a probe mark are untouched.
func TestProbeEncap(t *testing.T) {
	mark := func(n uint32) uint32 { return loader.ProbeMarkBase | n }
	be4, be6 := netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00:1::5")
	r := newProbeRig(t, map[uint32]netip.Addr{mark(1): be4, mark(2): be6})
	src4 := netip.PrefixFrom(src4Base, 16) // Src4HashBits 16 in the harness's config
	src6 := netip.PrefixFrom(src6Base, 96)
	cases := []struct {
		name    string
		p       pkt
		mark    uint32
		dst     netip.Addr
		outerV6 bool
		proto   uint8
		counter string
	}{
		{"ipip", pkt{src: "10.0.0.2", dst: "198.18.100.1", sport: 40000, dport: 80, proto: "tcp", flags: "S", tos: 0x28}, mark(1), be4, false, 4, "probe_ipip"},
		{"ip6ip6", pkt{src: "fd00::2", dst: "fd00:5e:100::1", sport: 40000, dport: 80, proto: "tcp", flags: "S", tos: 0x28}, mark(2), be6, true, 41, "probe_ip6ip6"},
		{"4in6", pkt{src: "10.0.0.2", dst: "198.18.100.1", sport: 40001, dport: 80, proto: "tcp", flags: "A", payload: 40}, mark(2), be6, true, 4, "probe_4in6"},
		{"6in4", pkt{src: "fd00::2", dst: "fd00:5e:100::1", sport: 40001, dport: 80, proto: "tcp", flags: "S", tos: 0x10}, mark(1), be4, false, 41, "probe_6in4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			frame := c.p.build(t)
			before := r.counters()[c.counter].Packets
			v, out := r.run(frame, c.mark)
			if v != tcOK {
				t.Fatalf("verdict %d, want TC_ACT_OK", v)
			}
			e := decodeEncap(t, out) // checks the outer IPv4 checksum
			if !bytes.Equal(e.ethDst, nextHopMAC) || !bytes.Equal(e.ethSrc, lbMAC) {
				t.Errorf("ethernet %s -> %s, want %s -> %s (the forwarder's frame config)", e.ethSrc, e.ethDst, lbMAC, nextHopMAC)
			}
			if e.outerV6 != c.outerV6 || e.outerDst != c.dst || e.outerProto != c.proto || e.ttl != 64 {
				t.Errorf("outer v6=%v dst %s proto %d ttl %d, want v6=%v dst %s proto %d ttl 64", e.outerV6, e.outerDst, e.outerProto, e.ttl, c.outerV6, c.dst, c.proto)
			}
			if in := (map[bool]netip.Prefix{false: src4, true: src6})[c.outerV6]; !in.Contains(e.outerSrc) {
				t.Errorf("outer source %s outside the encap range %s", e.outerSrc, in)
			}
			if e.tos != c.p.tos {
				t.Errorf("outer tos %#x, want the inner's %#x", e.tos, c.p.tos)
			}
			sameBytes(t, "inner packet", e.inner, l3(frame))
			if len(out) != len(frame)+map[bool]int{false: 20, true: 40}[c.outerV6] {
				t.Errorf("frame grew from %d to %d bytes", len(frame), len(out))
			}
			if got := r.counters()[c.counter].Packets; got != before+1 {
				t.Errorf("%s = %d, want %d", c.counter, got, before+1)
			}
		})
	}
	// The inner TCP checksum is still right (it is the same bytes: checked once for the record).
	frame := cases[0].p.build(t)
	_, out := r.run(frame, mark(1))
	in := decodeEncap(t, out).inner
	if csum(in[20:], tcpPseudo4(in)) != 0 {
		t.Error("inner TCP checksum broken by the encapsulation")
	}
}

func tcpPseudo4(ip []byte) uint32 {
	var s uint32
	for i := 12; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	return s + 6 + uint32(len(ip)-20)
}

// TestProbeEncapLeavesOthers: packets without the probe mark (no mark, another program's mark, a
// mark that shares only the low bits) pass byte for byte; a probe mark without a target and a
// marked packet that is not IP are dropped, never sent to the VIP untunnelled.
func TestProbeEncapLeavesOthers(t *testing.T) {
	r := newProbeRig(t, map[uint32]netip.Addr{loader.ProbeMarkBase | 1: netip.MustParseAddr("10.1.0.5")})
	syn4 := pkt{src: "10.0.0.2", dst: "198.18.100.1", sport: 40000, dport: 80, proto: "tcp", flags: "S"}.build(t)
	syn6 := pkt{src: "fd00::2", dst: "fd00:5e:100::1", sport: 40000, dport: 80, proto: "tcp", flags: "S"}.build(t)
	for _, m := range []uint32{0, 1, 0x12340001, loader.ProbeMarkBase>>1 | 1} {
		for _, f := range [][]byte{syn4, syn6} {
			v, out := r.run(f, m)
			if v != tcNext {
				t.Fatalf("mark %#x: verdict %d, want TC_ACT_UNSPEC (the next program decides)", m, v)
			}
			sameBytes(t, "unmarked frame", out, f)
		}
	}
	for _, name := range loader.ProbeCounterNames {
		if c := r.counters()[name]; c.Packets != 0 {
			t.Errorf("%s = %d after unmarked packets only", name, c.Packets)
		}
	}
	if v, _ := r.run(syn4, loader.ProbeMarkBase|7); v != tcShot {
		t.Errorf("probe mark without target: verdict %d, want TC_ACT_SHOT", v)
	}
	arp := append([]byte(nil), syn4[:42]...)
	arp[12], arp[13] = 0x08, 0x06
	if v, _ := r.run(arp, loader.ProbeMarkBase|1); v != tcShot {
		t.Errorf("marked ARP frame: verdict %d, want TC_ACT_SHOT", v)
	}
	c := r.counters()
	if c["probe_no_target"].Packets != 1 || c["probe_error"].Packets != 1 {
		t.Errorf("counters %+v, want one probe_no_target and one probe_error", c)
	}
	// SetTargets replaces the set: the old mark is gone, a new one is there.
	if err := r.p.SetTargets(map[uint32]netip.Addr{loader.ProbeMarkBase | 7: netip.MustParseAddr("10.1.0.6")}); err != nil {
		t.Fatal(err)
	}
	if v, _ := r.run(syn4, loader.ProbeMarkBase|1); v != tcShot {
		t.Errorf("removed target still encapsulates: verdict %d", v)
	}
	if v, out := r.run(syn4, loader.ProbeMarkBase|7); v != tcOK || decodeEncap(t, out).outerDst != netip.MustParseAddr("10.1.0.6") {
		t.Errorf("new target: verdict %d", v)
	}
	if err := r.p.SetTargets(map[uint32]netip.Addr{1: netip.MustParseAddr("10.1.0.6")}); err == nil {
		t.Error("SetTargets took a mark outside the probe range")
	}
}
