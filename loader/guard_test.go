package loader_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// guardDP is a dataplane with one TCP VIP (id 0) and one UDP VIP (id 1), and the guard state it
// last wrote.
type guardDP struct {
	*dataplane
	have maps.GuardState
}

func newGuardDP(t *testing.T) *guardDP {
	dp := newDataplane(t)
	dp.vip(0, vip4, 80, maps.TCP, 0, be4...)
	dp.vip(1, vip4, 53, maps.UDP, 0, be4...)
	dp.vip(2, vip6, 80, maps.TCP, 0, be6...)
	dp.vip(3, vip4, 8080, maps.TCP, 0, be4...)
	return &guardDP{dataplane: dp}
}

// set writes a guard state, only the differences from the last one.
func (g *guardDP) set(want maps.GuardState) {
	g.t.Helper()
	if err := g.s.WriteGuard(g.have, want); err != nil {
		g.t.Fatal(err)
	}
	g.have = want
}

func (g *guardDP) guardCounters() map[string]maps.Counter {
	g.t.Helper()
	c, err := g.s.GuardCounters()
	if err != nil {
		g.t.Fatal(err)
	}
	return c
}

// expect sends a frame and fails unless its verdict is want.
func (g *guardDP) expect(what string, p pkt, want uint32) {
	g.t.Helper()
	if v, _ := g.run(p.build(g.t)); v != want {
		g.t.Fatalf("%s: verdict %s, want %s", what, verdictName[v], verdictName[want])
	}
}

func syn4(src string, sport uint16) pkt {
	return pkt{src: src, dst: vip4, sport: sport, dport: 80, proto: "tcp", flags: "S"}
}

func rule(scope uint16, prefix string, deny bool) maps.GuardRule {
	return maps.GuardRule{Scope: scope, Prefix: netip.MustParsePrefix(prefix), Deny: deny}
}

// counterGrew fails unless counter name grew by want since before.
func counterGrew(t *testing.T, before, after map[string]maps.Counter, name string, want uint64) {
	t.Helper()
	if got := after[name].Packets - before[name].Packets; got != want {
		t.Errorf("%s grew by %d, want %d", name, got, want)
	}
}

// TestGuardDeny: a global deny rule drops new flows from its prefix toward every guarded VIP,
// counted as deny and in the VIP's drops; a VIP's own rule applies to that VIP only; a VIP whose
// guard is off is not guarded, global rules or not.
func TestGuardDeny(t *testing.T) {
	g := newGuardDP(t)
	g.set(maps.GuardState{
		VIPs: map[uint32]maps.GuardVIP{0: {GlobalDeny: true, Deny: true}, 1: {GlobalDeny: true}},
		Rules: map[maps.GuardRule]bool{
			rule(maps.GuardScopeGlobal, "198.18.7.0/24", true): true,
			rule(0, "198.18.8.0/24", true):                     true,
		},
	})
	before := g.guardCounters()
	g.expect("globally denied source", syn4("198.18.7.9", 1000), xdpDrop)
	g.expect("source denied for this VIP", syn4("198.18.8.9", 1000), xdpDrop)
	g.expect("other source", syn4("198.18.9.9", 1000), xdpTX)
	g.expect("denied for VIP 0 only, toward the UDP VIP", pkt{src: "198.18.8.9", dst: vip4, sport: 1, dport: 53, proto: "udp"}, xdpTX)
	g.expect("globally denied, toward the UDP VIP", pkt{src: "198.18.7.9", dst: vip4, sport: 1, dport: 53, proto: "udp"}, xdpDrop)
	g.expect("globally denied, toward a VIP whose guard is off", pkt{src: "198.18.7.9", dst: vip4, sport: 1, dport: 8080, proto: "tcp", flags: "S"}, xdpTX)
	g.expect("an IPv6 source never matches IPv4 rules", pkt{src: cli6, dst: vip6, sport: 1, dport: 80, proto: "tcp", flags: "S"}, xdpTX)
	after := g.guardCounters()
	counterGrew(t, before, after, "deny", 3)
	if d, err := g.s.VIPDrops(0); err != nil || d.Packets != 2 {
		t.Errorf("VIP 0 drops %d (%v), want 2", d.Packets, err)
	}
	// Rules removed at run time: the source connects again.
	g.set(maps.GuardState{VIPs: map[uint32]maps.GuardVIP{0: {GlobalDeny: true}}, Rules: map[maps.GuardRule]bool{rule(maps.GuardScopeGlobal, "198.18.7.0/24", true): true}})
	g.expect("rule of VIP 0 removed", syn4("198.18.8.9", 1001), xdpTX)
	rules, err := g.s.GuardRules()
	if err != nil || len(rules) != 1 || rules[0] != rule(maps.GuardScopeGlobal, "198.18.7.0/24", true) {
		t.Errorf("rules in the maps: %v (%v), want the global deny only", rules, err)
	}
}

// TestGuardAllowOverrides: an allow rule exempts its sources from deny rules and from the
// per-source and per-VIP limits; the rest of the denied prefix is still dropped.
func TestGuardAllowOverrides(t *testing.T) {
	g := newGuardDP(t)
	g.set(maps.GuardState{
		VIPs: map[uint32]maps.GuardVIP{0: {GlobalDeny: true, Allow: true, SourcePrefix4: 32, SourcePrefix6: 128,
			PerSource: maps.GuardLimit{Rate: 1, Burst: 1}, PerVIP: maps.GuardLimit{Rate: 1, Burst: 1}}},
		Rules: map[maps.GuardRule]bool{
			rule(maps.GuardScopeGlobal, "198.18.0.0/16", true): true,
			rule(0, "198.18.5.0/24", false):                    true,
		},
	})
	before := g.guardCounters()
	for i := range 5 {
		g.expect(fmt.Sprintf("allowed SYN %d", i), syn4("198.18.5.1", uint16(2000+i)), xdpTX)
	}
	g.expect("denied source outside the allowed /24", syn4("198.18.6.1", 2000), xdpDrop)
	after := g.guardCounters()
	counterGrew(t, before, after, "allowed", 5)
	counterGrew(t, before, after, "deny", 1)
}

// TestGuardSourceBucket: a source prefix's bucket lets burst new connections through, drops the
// next (source_rate), refills at rate, and is per prefix: another address in the same /24 shares
// it, one in another /24 does not. IPv6 sources share a bucket per /64.
func TestGuardSourceBucket(t *testing.T) {
	g := newGuardDP(t)
	lim := maps.GuardLimit{Rate: 10, Burst: 3}
	g.set(maps.GuardState{VIPs: map[uint32]maps.GuardVIP{
		0: {SourcePrefix4: 24, SourcePrefix6: 64, PerSource: lim},
		2: {SourcePrefix4: 24, SourcePrefix6: 64, PerSource: lim},
	}})
	before := g.guardCounters()
	for i := range 3 {
		g.expect(fmt.Sprintf("SYN %d within the burst", i), syn4(fmt.Sprintf("198.18.20.%d", i+1), 3000), xdpTX)
	}
	g.expect("fourth SYN of the /24", syn4("198.18.20.77", 3000), xdpDrop)
	g.expect("another /24", syn4("198.18.21.1", 3000), xdpTX)
	// Mid-stream packets without an entry are never rate limited (flows moved by ECMP).
	g.expect("mid-stream miss from the limited /24", pkt{src: "198.18.20.77", dst: vip4, sport: 3001, dport: 80, proto: "tcp", flags: "A"}, xdpTX)
	// Refill: 10 a second, so 300 ms brings back at least 2 tokens (the clock is a tick coarse).
	time.Sleep(300 * time.Millisecond)
	g.expect("after the refill", syn4("198.18.20.5", 3002), xdpTX)
	g.expect("after the refill, again", syn4("198.18.20.6", 3002), xdpTX)
	syn6 := func(src string) pkt {
		return pkt{src: src, dst: vip6, sport: 3000, dport: 80, proto: "tcp", flags: "S"}
	}
	for i := range 3 {
		g.expect(fmt.Sprintf("IPv6 SYN %d", i), syn6(fmt.Sprintf("fd00:5e:20:1::%d", i+1)), xdpTX)
	}
	g.expect("fourth SYN of the /64", syn6("fd00:5e:20:1:ffff::1"), xdpDrop)
	g.expect("another /64", syn6("fd00:5e:20:2::1"), xdpTX)
	after := g.guardCounters()
	counterGrew(t, before, after, "source_rate", 2)
	counterGrew(t, before, after, "source_buckets_made", 4)
}

// TestGuardVIPBucket: the VIP's bucket limits new connections from every source together; UDP
// datagrams without an entry count as new connections.
func TestGuardVIPBucket(t *testing.T) {
	g := newGuardDP(t)
	g.set(maps.GuardState{VIPs: map[uint32]maps.GuardVIP{
		0: {PerVIP: maps.GuardLimit{Rate: 1, Burst: 2}},
		1: {PerVIP: maps.GuardLimit{Rate: 1, Burst: 1}},
	}})
	before := g.guardCounters()
	g.expect("first", syn4("198.18.30.1", 1), xdpTX)
	g.expect("second", syn4("198.18.31.1", 1), xdpTX)
	g.expect("third, another source", syn4("198.18.32.1", 1), xdpDrop)
	udp := func(src string) pkt { return pkt{src: src, dst: vip4, sport: 9, dport: 53, proto: "udp"} }
	g.expect("UDP first", udp("198.18.30.1"), xdpTX)
	g.expect("UDP second, its entry made", udp("198.18.30.1"), xdpTX)
	g.expect("UDP new flow over the VIP's rate", udp("198.18.30.2"), xdpDrop)
	counterGrew(t, before, g.guardCounters(), "vip_rate", 2)
}

// TestGuardVIPBucketFirst: with both limits, an empty VIP bucket drops a new source's SYN before
// it makes a source bucket (a random-source flood then costs no LRU insert a packet), and a SYN
// the source's bucket refuses takes no token from the VIP's.
func TestGuardVIPBucketFirst(t *testing.T) {
	g := newGuardDP(t)
	g.set(maps.GuardState{VIPs: map[uint32]maps.GuardVIP{0: {SourcePrefix4: 32,
		PerSource: maps.GuardLimit{Rate: 1, Burst: 1}, PerVIP: maps.GuardLimit{Rate: 1, Burst: 2}}}})
	before := g.guardCounters()
	g.expect("first source, first SYN", syn4("198.18.33.1", 1), xdpTX)
	g.expect("first source over its rate", syn4("198.18.33.1", 2), xdpDrop)
	g.expect("second source: the VIP's token left", syn4("198.18.33.2", 1), xdpTX)
	for i := range 5 {
		g.expect("new source over the VIP's rate", syn4(fmt.Sprintf("198.18.34.%d", i+1), 1), xdpDrop)
	}
	after := g.guardCounters()
	counterGrew(t, before, after, "source_rate", 1)
	counterGrew(t, before, after, "vip_rate", 5)
	counterGrew(t, before, after, "source_buckets_made", 2)
}

// TestGuardSkipsEstablished: a flow in the connection table is never limited nor denied, even
// when its source is over its rate and later denied; its source's new connections are.
func TestGuardSkipsEstablished(t *testing.T) {
	g := newGuardDP(t)
	src := "198.18.40.1"
	g.expect("SYN", syn4(src, 4000), xdpTX)
	ack := pkt{src: src, dst: vip4, sport: 4000, dport: 80, proto: "tcp", flags: "A", payload: 10}
	g.expect("ACK", ack, xdpTX) // confirms the flow
	g.set(maps.GuardState{
		VIPs:  map[uint32]maps.GuardVIP{0: {Deny: true, SourcePrefix4: 32, PerSource: maps.GuardLimit{Rate: 1, Burst: 1}, PerVIP: maps.GuardLimit{Rate: 1, Burst: 1}}},
		Rules: map[maps.GuardRule]bool{rule(0, "198.18.41.0/24", true): true},
	})
	g.expect("new connection takes the only token", syn4(src, 4001), xdpTX)
	g.expect("new connection over the rate", syn4(src, 4002), xdpDrop)
	before := g.counters()
	for i := range 20 {
		g.expect(fmt.Sprintf("established packet %d", i), ack, xdpTX)
	}
	counterGrew(t, before, g.counters(), "conntrack_hit", 20)
	// Denied after it was established: the flow goes on.
	g.set(maps.GuardState{VIPs: map[uint32]maps.GuardVIP{0: {Deny: true}}, Rules: map[maps.GuardRule]bool{rule(0, src+"/32", true): true}})
	g.expect("established packet of a denied source", ack, xdpTX)
	g.expect("new connection of the denied source", syn4(src, 4003), xdpDrop)
}

// TestSYNFloodKeepsEstablished: a SYN flood from random sources, four times the connection
// table, leaves every established flow in the table and on its backend: SYNs make unconfirmed
// entries, which move to the table on the flow's first non-SYN packet only.
func TestSYNFloodKeepsEstablished(t *testing.T) {
	dp := newDataplaneOpts(t, loader.Options{RingSize: testRing, MaxVIPs: 8, MaxBackends: 64, ConnTableSize: 4096})
	dp.vip(0, vip4, 80, maps.TCP, 0, be4...)
	const conns = 200
	backend := map[uint16]netip.Addr{}
	for i := range conns {
		sport := uint16(10000 + i)
		dp.run(syn4(cli4, sport).build(t))
		v, out := dp.run(pkt{src: cli4, dst: vip4, sport: sport, dport: 80, proto: "tcp", flags: "A"}.build(t))
		if v != xdpTX {
			t.Fatalf("ACK %d: verdict %s", i, verdictName[v])
		}
		backend[sport] = decodeEncap(t, out).outerDst
	}
	before, _ := dp.s.GuardCounters()
	const flood = 4 * 4096
	for i := range flood {
		src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}).String()
		if v, _ := dp.run(syn4(src, uint16(i)).build(t)); v != xdpTX {
			t.Fatalf("flood SYN %d: verdict %s", i, verdictName[v])
		}
	}
	after, _ := dp.s.GuardCounters()
	counterGrew(t, before, after, "unconfirmed_promoted", 0)
	// Every established flow is still in the connection table, and its packets follow it.
	hits := dp.counters()["conntrack_hit"].Packets
	for sport, be := range backend {
		f := pkt{src: cli4, dst: vip4, sport: sport, dport: 80, proto: "tcp", flags: "A"}
		if _, ok, err := dp.s.LookupFlow(f.flow()); err != nil || !ok {
			t.Fatalf("established flow from port %d evicted by the flood (%v)", sport, err)
		}
		v, out := dp.run(f.build(t))
		if v != xdpTX || decodeEncap(t, out).outerDst != be {
			t.Fatalf("established flow from port %d: verdict %s, not to %s", sport, verdictName[v], be)
		}
	}
	if got := dp.counters()["conntrack_hit"].Packets - hits; got != conns {
		t.Errorf("conntrack_hit grew by %d, want %d", got, conns)
	}
	flows, err := dp.s.Flows()
	if err != nil {
		t.Fatal(err)
	}
	var confirmed, unconfirmed int
	for _, f := range flows {
		if f.Unconfirmed {
			unconfirmed++
		} else {
			confirmed++
		}
	}
	if confirmed != conns || unconfirmed > 4096/4 {
		t.Errorf("%d confirmed entries (want %d), %d unconfirmed (at most the table's %d)", confirmed, conns, unconfirmed, 4096/4)
	}
}

// TestSYNThenACKPromotes: a SYN's entry is unconfirmed; the retransmitted SYN rewrites it; the
// first ACK moves it to the connection table, on the same backend, and counts.
func TestSYNThenACKPromotes(t *testing.T) {
	for _, c := range []struct{ src, dst string }{{cli4, vip4}, {cli6, vip6}} {
		dp := newDataplane(t)
		dp.vip(0, vip4, 80, maps.TCP, 0, be4...)
		dp.vip(1, vip6, 80, maps.TCP, 0, be6...)
		syn := pkt{src: c.src, dst: c.dst, sport: 5555, dport: 80, proto: "tcp", flags: "S"}
		_, out := dp.run(syn.build(t))
		first := decodeEncap(t, out).outerDst
		dp.run(syn.build(t))
		flows, _ := dp.s.Flows()
		if len(flows) != 1 || !flows[0].Unconfirmed {
			t.Fatalf("%s: after two SYNs: %+v, want one unconfirmed entry", c.src, flows)
		}
		before, _ := dp.s.GuardCounters()
		v, out := dp.run(pkt{src: c.src, dst: c.dst, sport: 5555, dport: 80, proto: "tcp", flags: "A"}.build(t))
		if v != xdpTX || decodeEncap(t, out).outerDst != first {
			t.Fatalf("%s: ACK verdict %s, not to the SYN's backend %s", c.src, verdictName[v], first)
		}
		after, _ := dp.s.GuardCounters()
		counterGrew(t, before, after, "unconfirmed_promoted", 1)
		flows, _ = dp.s.Flows()
		if len(flows) != 1 || flows[0].Unconfirmed || flows[0].Backend == 0 {
			t.Fatalf("%s: after the ACK: %+v, want one confirmed entry", c.src, flows)
		}
	}
}

// TestForeignMACPassed: a frame toward a VIP whose destination MAC is not the balancer's (unicast
// flooding on a shared segment, broadcast) passes untouched and is counted, on the established
// path as well as for a new flow; with no MAC configured every frame is taken.
func TestForeignMACPassed(t *testing.T) {
	dp := newDataplane(t)
	dp.vip(0, vip4, 80, maps.TCP, 0, be4...)
	dp.vip(1, vip6, 80, maps.TCP, 0, be6...)
	dp.run(syn4(cli4, 6000).build(t))
	dp.run(pkt{src: cli4, dst: vip4, sport: 6000, dport: 80, proto: "tcp", flags: "A"}.build(t))
	before, _ := dp.s.GuardCounters()
	for _, mac := range []net.HardwareAddr{{0x02, 0, 0, 0, 0, 0x09}, {0x02, 0, 0, 0, 1, 0x02}, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff}} {
		for _, p := range []pkt{syn4(cli4, 6001), {src: cli4, dst: vip4, sport: 6000, dport: 80, proto: "tcp", flags: "A"},
			{src: cli6, dst: vip6, sport: 1, dport: 80, proto: "tcp", flags: "S"}} {
			frame := p.build(t)
			copy(frame[0:6], mac)
			want := append([]byte(nil), frame...)
			v, out := dp.run(frame)
			if v != xdpPass {
				t.Fatalf("to %s, %s %s: verdict %s, want PASS", mac, p.src, p.flags, verdictName[v])
			}
			sameBytes(t, "passed frame", out[:len(want)], want)
		}
	}
	after, _ := dp.s.GuardCounters()
	counterGrew(t, before, after, "foreign_mac_passed", 9)
	dp.config(func(c *maps.Config) { c.IfMAC = make(net.HardwareAddr, 6) })
	frame := syn4(cli4, 6002).build(t)
	copy(frame[0:6], []byte{0x02, 0, 0, 0, 0, 0x09})
	if v, _ := dp.run(frame); v != xdpTX {
		t.Errorf("no MAC configured: verdict %s, want TX", verdictName[v])
	}
}

// TestGuardSourceEvictionsCounted: a random-source flood cannot fill the guard's own state: the
// source buckets are an LRU map of fixed size, and what it evicted is counted (made less present).
func TestGuardSourceEvictionsCounted(t *testing.T) {
	dp := newDataplaneOpts(t, loader.Options{RingSize: testRing, MaxVIPs: 8, MaxBackends: 64, ConnTableSize: 4096, GuardSources: 256})
	dp.vip(0, vip4, 80, maps.TCP, 0, be4...)
	g := &guardDP{dataplane: dp}
	g.set(maps.GuardState{VIPs: map[uint32]maps.GuardVIP{0: {SourcePrefix4: 32, PerSource: maps.GuardLimit{Rate: 1, Burst: 1}}}})
	const sources = 2000
	for i := range sources {
		g.expect("first SYN of a source", syn4(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}).String(), 1), xdpTX)
	}
	c := g.guardCounters()
	present, err := dp.s.GuardSources()
	if err != nil {
		t.Fatal(err)
	}
	if c["source_buckets_made"].Packets != sources || present > 256 || c["source_buckets_evicted"].Packets != uint64(sources-present) {
		t.Errorf("made %d, present %d (map of 256), evicted %d: want %d made, at most 256 present, the rest evicted",
			c["source_buckets_made"].Packets, present, c["source_buckets_evicted"].Packets, sources)
	}
}
