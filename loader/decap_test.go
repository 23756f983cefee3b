package loader_test

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// TestDecap feeds the forwarder's own output to the decap program: IPIP, 4in6 and IP6IP6
// addressed to the host come out as the original packet behind an Ethernet header with the
// inner EtherType; anything else passes untouched.
func TestDecap(t *testing.T) {
	dp := newDataplane(t)
	dp.vip(0, vip4, 80, maps.TCP, 0, "198.18.3.1")
	dp.vip(1, vip6, 80, maps.TCP, 0, "fd00:5e:3::1")
	dp.vip(2, vip46, 80, maps.TCP, 0, "fd00:5e:3::1")
	d, err := loader.OpenDecap("")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.SetAddrs([]netip.Addr{netip.MustParseAddr("198.18.3.1"), netip.MustParseAddr("fd00:5e:3::1")}); err != nil {
		t.Fatal(err)
	}
	run := func(frame []byte) (uint32, []byte) {
		opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+64)}
		v, err := d.Objs.XdpDecap.Run(&opts)
		if err != nil {
			t.Fatal(err)
		}
		return v, opts.DataOut
	}
	cases := []struct {
		name    string
		p       pkt
		counter string
	}{
		{"ipip", pkt{src: cli4, dst: vip4, sport: 1, dport: 80, proto: "tcp", flags: "S", payload: 33}, "decap_ipip"},
		{"ip6ip6", pkt{src: cli6, dst: vip6, sport: 1, dport: 80, proto: "tcp", flags: "S", payload: 33}, "decap_ip6ip6"},
		{"4in6", pkt{src: cli4, dst: vip46, sport: 1, dport: 80, proto: "tcp", flags: "S", payload: 33}, "decap_4in6"},
		{"vlan ipip", pkt{src: cli4, dst: vip4, sport: 2, dport: 80, proto: "tcp", flags: "S", vlan: 9}, "decap_ipip"},
	}
	for _, c := range cases {
		in := c.p.build(t)
		v, enc := dp.run(in)
		if v != xdpTX {
			t.Fatalf("%s: forwarder verdict %s", c.name, verdictName[v])
		}
		before, _ := d.Counters()
		v, out := run(enc)
		if v != xdpPass {
			t.Fatalf("%s: decap verdict %s", c.name, verdictName[v])
		}
		after, _ := d.Counters()
		if after[c.counter].Packets != before[c.counter].Packets+1 {
			t.Fatalf("%s: counter %s not incremented", c.name, c.counter)
		}
		sameBytes(t, c.name+" inner packet", l3(out), l3(in))
		et := binary.BigEndian.Uint16(out[12:])
		if c.p.vlan != 0 {
			et = binary.BigEndian.Uint16(out[16:])
		}
		want := uint16(0x0800)
		if netip.MustParseAddr(c.p.src).Is6() {
			want = 0x86dd
		}
		if et != want {
			t.Fatalf("%s: ethertype %#x, want %#x", c.name, et, want)
		}
	}
	// A tunnel packet for another host, and plain traffic, pass untouched.
	dp.vip(3, vipAP, 0, maps.TCP, 0, "198.18.3.77")
	_, other := dp.run(pkt{src: cli4, dst: vipAP, sport: 1, dport: 80, proto: "tcp", flags: "S"}.build(t))
	plain := pkt{src: cli4, dst: "198.18.3.1", sport: 1, dport: 22, proto: "tcp", flags: "S"}.build(t)
	for _, f := range [][]byte{other, plain} {
		in := append([]byte(nil), f...)
		v, out := run(f)
		if v != xdpPass {
			t.Fatalf("verdict %s", verdictName[v])
		}
		sameBytes(t, "untouched frame", out, in)
	}
	c, _ := d.Counters()
	if c["pass"].Packets != 2 {
		t.Fatalf("pass counter %d, want 2", c["pass"].Packets)
	}
}
