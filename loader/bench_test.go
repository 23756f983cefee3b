package loader_test

import (
	"encoding/binary"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
	"github.com/switchyard/switchyard/maps"
)

// BenchmarkXDP measures ns/packet through BPF_PROG_TEST_RUN. Encapsulating cases run the
// xdp_lb_bench wrapper, which undoes the encapsulation after each pass (with repeat, the kernel
// keeps the changed frame); after the run the per-CPU counters prove that every one of the b.N
// passes took the expected path. Run with -benchtime=1000000x for the 1e6 repeats bench/xdp.sh uses.
//
// With KATRAN_DIR set (Katran's BPF sources, see katran_bench_test.go), the katran_* cases time
// Katran on the same frames through the same wrapper, case by case beside switchyard's, so every
// round alternates the two. many_flows and katran_many_flows walk 2^20 distinct established flows
// (xdp_lb_bench_flows, bpf/include/bench.h), prefilled in another order, so the table is cold.
// Every case runs on one CPU (the first the process may use; bench/xdp.sh pins it with taskset):
// Katran's LRU is per CPU, and the prefill must be where the timed runs are.
func BenchmarkXDP(b *testing.B) {
	cpu := firstCPU(b)
	pinThread(b, cpu)
	// The benchmark's sizes: Katran's ring (65537), a table that holds the many-flows case twice.
	dp := newDataplaneOpts(b, loader.Options{RingSize: 65537, MaxVIPs: 8, MaxBackends: 64, ConnTableSize: benchConnTable, ConnTable6Size: 4096})
	var backends []string
	for i := 1; i <= 16; i++ {
		backends = append(backends, "198.18.3."+itoa(i))
	}
	dp.vip(0, vip4, 80, maps.TCP, 0, backends...)
	objs := benchObjects(b, dp.f)
	bench := objs.XdpLbBench

	syn := pkt{src: cli4, dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "S", payload: 0}.build(b)
	ack := pkt{src: cli4, dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "A", payload: 0}.build(b)
	pass := pkt{src: cli4, dst: "198.18.200.1", sport: 40000, dport: 22, proto: "tcp", flags: "A"}.build(b)
	reply := pkt{src: vip4, dst: cli4, sport: 80, dport: 40000, proto: "tcp", flags: "A", payload: 1400}.build(b)
	body := append([]byte(nil), l3(reply)[:48]...)
	ptb := pkt{src: "198.18.0.1", dst: vip4, proto: "icmp", icmpType: 3, icmpCode: 4, icmpBody: body}.build(b)
	copy(ptb[14+20+4:], []byte{0, 0, 0x05, 0x78})
	fixICMPChecksum(ptb, false)
	// The many-flows frames: sources 10.0.0.0/12 (2^20 flows); the IP id is the stride.
	synFlows := flowsFrame(pkt{src: "10.0.0.0", dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "S"}.build(b), 1)
	ackFlows := flowsFrame(pkt{src: "10.0.0.0", dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "A"}.build(b), benchStride)
	// new_flows_distinct: SYNs of 5-tuples no run has sent (a fresh /12 of sources each run), so
	// every pass inserts, and once the tables are full every insert evicts.
	synFresh := flowsFrame(pkt{src: "20.0.0.0", dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "S"}.build(b), 1)
	// guard_drop: a SYN from a denied source, dropped by the guard (docs/xdp.md, "The guard").
	// guard_flood: a SYN from another source each pass (the flows wrapper), dropped by the VIP's
	// new-connection limit under a per-source limit too: a random-source flood. The guard is on
	// for those cases only, so that every other case measures the path without it.
	synDenied := pkt{src: "198.18.50.1", dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "S"}.build(b)
	guardDeny := &maps.GuardState{VIPs: map[uint32]maps.GuardVIP{0: {GlobalDeny: true}},
		Rules: map[maps.GuardRule]bool{{Scope: maps.GuardScopeGlobal, Prefix: netip.MustParsePrefix("198.18.50.0/24"), Deny: true}: true}}
	synFlood := flowsFrame(pkt{src: "30.0.0.0", dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "S"}.build(b), benchStride)
	guardLimits := &maps.GuardState{VIPs: map[uint32]maps.GuardVIP{0: {SourcePrefix4: 32, SourcePrefix6: 64,
		PerSource: maps.GuardLimit{Rate: 1, Burst: 1}, PerVIP: maps.GuardLimit{Rate: 1, Burst: 1}}}}
	var guardHave maps.GuardState
	setGuard := func(on *maps.GuardState) {
		want := maps.GuardState{}
		if on != nil {
			want = *on
		}
		if err := dp.s.WriteGuard(guardHave, want); err != nil {
			b.Fatal(err)
		}
		guardHave = want
	}
	gy := func(counter string) pathCheck {
		return func(tb testing.TB, n int, run func()) {
			before, _ := dp.s.GuardCounters()
			run()
			after, _ := dp.s.GuardCounters()
			if got := after[counter].Packets - before[counter].Packets; got != uint64(n) {
				tb.Fatalf("guard counter %s grew by %d over %d passes: not every pass took the measured path", counter, got, n)
			}
		}
	}

	// gyAtLeast is gy for a case whose first passes may take another path (a token left in a
	// bucket): all but slack of the passes must have.
	gyAtLeast := func(counter string, slack uint64) pathCheck {
		return func(tb testing.TB, n int, run func()) {
			before, _ := dp.s.GuardCounters()
			run()
			after, _ := dp.s.GuardCounters()
			if got := after[counter].Packets - before[counter].Packets; got+slack < uint64(n) || got > uint64(n) {
				tb.Fatalf("guard counter %s grew by %d over %d passes: not every pass took the measured path", counter, got, n)
			}
		}
	}

	minimal := objs
	// The floor program needs its one table entry: the 16 bytes after the Ethernet header.
	var fk bpfobj.BenchFloorKey
	for i := range fk.W {
		fk.W[i] = binary.LittleEndian.Uint32(ack[14+4*i:])
	}
	if err := minimal.FloorTable.Put(fk, uint64(1)); err != nil {
		b.Fatal(err)
	}
	// The cold floor's table: the 2^20 flows of the many-flows frame, in the order of stride 1
	// (the timed run goes by benchStride).
	floorFlows := flowsFrame(pkt{src: "10.0.0.0", dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "A"}.build(b), benchStride)
	fillColdFloor(b, minimal.FloorColdTable, floorFlows)
	sy := func(counter string) pathCheck {
		return func(tb testing.TB, n int, run func()) {
			before := dp.counters()
			run()
			if counter != "" {
				after := dp.counters()
				if got := after[counter].Packets - before[counter].Packets; got != uint64(n) {
					tb.Fatalf("counter %s grew by %d over %d passes: not every pass took the measured path", counter, got, n)
				}
			}
		}
	}
	// Prefill the many-flows case: every flow once, in the order of stride 1, by a mid-stream
	// ACK, whose miss makes the flow's entry in the connection table (a SYN's would go to the
	// unconfirmed table, a quarter of its size: the flows would not be established).
	ackPrefill := flowsFrame(pkt{src: "10.0.0.0", dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "A"}.build(b), 1)
	prefill(b, objs.XdpLbBenchFlows, ackPrefill, sy("conntrack_miss_nonsyn"))
	type benchCase struct {
		name    string
		prog    *ebpf.Program
		frame   []byte
		verdict uint32
		check   pathCheck
		prep    func()
		fresh   bool             // a new block of 2^20 sources each run: every SYN a 5-tuple never seen
		guard   *maps.GuardState // the guard while the case runs (nil: off)
	}
	synOnce := func() { dp.run(syn) } // the established case needs its entry
	floodPrep := func() {             // guard_flood: a SYN that takes the VIP's one token, if it has it
		dp.run(pkt{src: "198.18.60.1", dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "S"}.build(b))
	}
	cases := []benchCase{
		{"pass", bench, pass, xdpPass, sy("pass"), nil, false, nil},
		{"new_flow", bench, syn, xdpTX, sy("conntrack_miss_syn"), nil, false, nil},
		{"established", bench, ack, xdpTX, sy("conntrack_hit"), synOnce, false, nil},
		{"many_flows", objs.XdpLbBenchFlows, ackFlows, xdpTX, sy("conntrack_hit"), nil, false, nil},
		{"icmp_ptb", bench, ptb, xdpTX, sy("icmp_forwarded"), synOnce, false, nil},
		{"guard_drop", bench, synDenied, xdpDrop, gy("deny"), nil, false, guardDeny},
		// floodPrep takes the VIP's token first; a run longer than a second would see another:
		// the check allows for two.
		{"guard_flood", objs.XdpLbBenchFlows, synFlood, xdpDrop, gyAtLeast("vip_rate", 2), floodPrep, false, guardLimits},
		{"minimal", minimal.XdpMacswap, ack, xdpTX, sy(""), nil, false, nil},
		{"lookup_floor", minimal.XdpLookupFloor, ack, xdpTX, sy(""), nil, false, nil},
		{"lookup_floor_cold", minimal.XdpLookupFloorCold, floorFlows, xdpTX, sy(""), nil, false, nil},
		// Last in the round: it fills the tables past their size, evicting the many-flows entries.
		{"new_flows_distinct", objs.XdpLbBenchFlows, synFresh, xdpTX, sy("conntrack_miss_syn"), nil, true, nil},
	}
	if dir := os.Getenv("KATRAN_DIR"); dir == "" {
		b.Log("Katran cases skipped: KATRAN_DIR is not set (point it at Katran's BPF sources)")
	} else {
		k := newKatranPeer(b, dir, vip4, 80, backends)
		kc := func(p katranPath) pathCheck {
			return func(tb testing.TB, n int, run func()) {
				before := k.snapshot(tb)
				run()
				p.check(tb, before, k.snapshot(tb), uint64(n))
			}
		}
		prefill(b, k.flowsInsert, synFlows, kc(katranPathNewFlow))
		kSynOnce := func() {
			if ret, _, err := k.benchInsert.Benchmark(syn, 1, nil); err != nil || ret != xdpTX {
				b.Fatalf("katran syn: verdict %d, %v", ret, err)
			}
		}
		// Each Katran case right after switchyard's, so the rounds alternate case by case.
		kcases := map[string]benchCase{
			"pass":               {"katran_pass", k.bench, pass, xdpPass, kc(katranPathPass), nil, false, nil},
			"new_flow":           {"katran_new_flow_insert", k.benchInsert, syn, xdpTX, kc(katranPathNewFlow), nil, false, nil},
			"new_flows_distinct": {"katran_new_flows_distinct", k.flowsInsert, synFresh, xdpTX, kc(katranPathNewFlow), nil, true, nil},
			"established":        {"katran_established", k.bench, ack, xdpTX, kc(katranPathEstablished), kSynOnce, false, nil},
			"many_flows":         {"katran_many_flows", k.flows, ackFlows, xdpTX, kc(katranPathEstablished), nil, false, nil},
		}
		var all []benchCase
		for _, c := range cases {
			all = append(all, c)
			if kc, ok := kcases[c.name]; ok {
				all = append(all, kc)
			}
			if c.name == "new_flow" { // Katran's default: no insert above MAX_CONN_RATE a second
				all = append(all, benchCase{"katran_new_flow", k.bench, syn, xdpTX, kc(katranPathNewFlow), nil, false, nil})
			}
		}
		cases = all
	}
	fresh := map[string]int{} // runs so far of each fresh case
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			pinThread(b, cpu)
			setGuard(c.guard)
			if c.prep != nil {
				c.prep()
			}
			frame := c.frame
			if c.fresh {
				frame = freshSources(c.frame, fresh[c.name])
				fresh[c.name]++
			}
			c.check(b, b.N, func() {
				ret, per, err := c.prog.Benchmark(frame, b.N, nil)
				if err != nil {
					b.Fatal(err)
				}
				if ret != c.verdict {
					b.Fatalf("verdict %s, want %s", verdictName[ret], verdictName[c.verdict])
				}
				b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
			})
		})
	}
}

// benchConnTable is switchyard's IPv4 connection table in the benchmark: 2M entries a CPU on this
// 2-CPU machine (one LRU list per CPU), Katran's per-CPU LRU size, twice the many-flows case.
const benchConnTable = 4 << 20

// benchStride is the many-flows case's step through its 2^20 flows (odd, so every flow comes once
// in 2^20 passes; far from 1, so that consecutive passes touch unrelated table entries).
const benchStride = 0x9e37

// flowsFrame sets the IPv4 id of a frame for xdp_lb_bench_flows: the stride between flows.
func flowsFrame(frame []byte, stride uint16) []byte {
	binary.BigEndian.PutUint16(frame[14+4:], stride)
	return frame
}

// fillColdFloor puts in table the keys xdp_lookup_floor_cold reads from frame (16 bytes from
// the IPv4 source address) for each of the 2^20 sources it visits.
func fillColdFloor(b *testing.B, table *ebpf.Map, frame []byte) {
	b.Helper()
	const n = 1 << 20
	keys := make([]bpfobj.BenchFloorKey, n)
	vals := make([]uint64, n)
	raw := append([]byte(nil), frame[14+12:14+28]...)
	src := binary.BigEndian.Uint32(raw)
	for i := range keys {
		binary.BigEndian.PutUint32(raw, src&^0xfffff|uint32(i))
		for w := range keys[i].W {
			keys[i].W[w] = binary.LittleEndian.Uint32(raw[4*w:])
		}
		vals[i] = 1
	}
	if _, err := table.BatchUpdate(keys, vals, nil); err != nil {
		b.Fatalf("fill the cold floor's table: %v", err)
	}
}

// freshSources gives a flows frame the n-th /12 of sources after its own (each case counts its
// runs; the tables are new every round, so a round never meets a tuple it sent).
func freshSources(frame []byte, n int) []byte {
	f := append([]byte(nil), frame...)
	src := binary.BigEndian.Uint32(f[14+12:]) + uint32(n%200)<<20
	binary.BigEndian.PutUint32(f[14+12:], src)
	return f
}

// pathCheck runs run (n passes) and fails unless the counters prove that every pass took the
// measured path.
type pathCheck func(tb testing.TB, n int, run func())

// prefill runs a flows wrapper over every one of the 2^20 flows once, checked like a case.
func prefill(b *testing.B, prog *ebpf.Program, frame []byte, check pathCheck) {
	b.Helper()
	const n = 1 << 20
	check(b, n, func() {
		ret, _, err := prog.Benchmark(frame, n, nil)
		if err != nil || ret != xdpTX {
			b.Fatalf("prefill: verdict %d, %v", ret, err)
		}
	})
}

// firstCPU is the first CPU this process may run on.
func firstCPU(b testing.TB) int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			return i
		}
	}
	b.Fatal("no CPU in the affinity mask")
	return 0
}

// pinThread keeps the calling goroutine on one OS thread bound to cpu. It stays locked: when the
// benchmark's goroutine ends, the runtime ends that thread too, so no other goroutine inherits it.
func pinThread(b testing.TB, cpu int) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		b.Fatal(err)
	}
}

// benchObjects loads the bench object (bpf/bench.c: the forwarder's wrappers on f's maps, and the
// reference programs).
func benchObjects(b *testing.B, f *loader.Forwarder) *bpfobj.BenchObjects {
	objs, err := loader.LoadBenchFor(f)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { objs.Close() })
	return objs
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
