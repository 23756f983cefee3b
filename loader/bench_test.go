package loader_test

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// BenchmarkXDP measures ns/packet through BPF_PROG_TEST_RUN. Encapsulating cases run the
// xdp_lb_bench wrapper, which undoes the encapsulation after each pass (with repeat, the kernel
// keeps the changed frame); after the run the per-CPU counters prove that every one of the b.N
// passes took the expected path. Run with -benchtime=1000000x for the 1e6 repeats.
func BenchmarkXDP(b *testing.B) {
	dp := newDataplane(b)
	var backends []string
	for i := 1; i <= 16; i++ {
		backends = append(backends, "198.18.3."+itoa(i))
	}
	dp.vip(0, vip4, 80, maps.TCP, 0, backends...)
	bench := dp.f.Objs.XdpLbBench

	syn := pkt{src: cli4, dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "S", payload: 0}.build(b)
	ack := pkt{src: cli4, dst: vip4, sport: 40000, dport: 80, proto: "tcp", flags: "A", payload: 0}.build(b)
	pass := pkt{src: cli4, dst: "198.18.200.1", sport: 40000, dport: 22, proto: "tcp", flags: "A"}.build(b)
	reply := pkt{src: vip4, dst: cli4, sport: 80, dport: 40000, proto: "tcp", flags: "A", payload: 1400}.build(b)
	body := append([]byte(nil), l3(reply)[:48]...)
	ptb := pkt{src: "198.18.0.1", dst: vip4, proto: "icmp", icmpType: 3, icmpCode: 4, icmpBody: body}.build(b)
	copy(ptb[14+20+4:], []byte{0, 0, 0x05, 0x78})
	fixICMPChecksum(ptb, false)

	minimal := passObjects(b)
	// The floor program needs its one table entry: the 40 bytes after the Ethernet header.
	var fk loader.PassFloorKey
	for i := range fk.W {
		fk.W[i] = binary.LittleEndian.Uint32(ack[14+4*i:])
	}
	if err := minimal.FloorTable.Put(fk, uint64(1)); err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name    string
		prog    *ebpf.Program
		frame   []byte
		verdict uint32
		counter string
	}{
		{"pass", bench, pass, xdpPass, "pass"},
		{"new_flow", bench, syn, xdpTX, "conntrack_miss_syn"},
		{"established", bench, ack, xdpTX, "conntrack_hit"},
		{"icmp_ptb", bench, ptb, xdpTX, "icmp_forwarded"},
		{"minimal", minimal.XdpMacswap, ack, xdpTX, ""},
		{"lookup_floor", minimal.XdpLookupFloor, ack, xdpTX, ""},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			dp.run(syn) // the established case needs its entry
			before := dp.counters()
			ret, per, err := c.prog.Benchmark(c.frame, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			if ret != c.verdict {
				b.Fatalf("verdict %s, want %s", verdictName[ret], verdictName[c.verdict])
			}
			if c.counter != "" {
				after := dp.counters()
				if got := after[c.counter].Packets - before[c.counter].Packets; got != uint64(b.N) {
					b.Fatalf("counter %s grew by %d over %d passes: not every pass took the measured path", c.counter, got, b.N)
				}
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/pkt")
		})
	}
}

func passObjects(b *testing.B) *loader.PassObjects {
	var objs loader.PassObjects
	if err := loader.LoadPassObjects(&objs, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { objs.Close() })
	return &objs
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}
