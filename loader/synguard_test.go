package loader_test

import (
	"testing"

	"github.com/switchyard/switchyard/maps"
)

// TestSYNInsertGuard: with syn_insert_limit N, the first N new SYNs of a second on a CPU get
// their entry and the rest are forwarded by the ring without one (conntrack_insert_skipped), to
// the same backend; a retransmitted SYN of a flow that has an entry is rewritten in place, never
// skipped; without a limit (the default) every SYN gets its entry.
func TestSYNInsertGuard(t *testing.T) {
	for _, limit := range []uint32{0, 3} {
		dp := newDataplane(t)
		dp.vip(0, vip4, 80, maps.TCP, 0, be4...)
		dp.config(func(c *maps.Config) { c.SYNInsertLimit = limit })
		before := dp.counters()
		const n = 8
		for i := 0; i < n; i++ {
			p := pkt{src: cli4, dst: vip4, sport: uint16(1000 + i), dport: 80, proto: "tcp", flags: "S"}
			v, out := dp.run(p.build(t))
			if v != xdpTX {
				t.Fatalf("limit %d: SYN %d: verdict %s, want TX", limit, i, verdictName[v])
			}
			if got, want := decodeEncap(t, out).outerDst, dp.expectBackend(0, 0, p.flow()); got != want {
				t.Fatalf("limit %d: SYN %d went to %s, the ring says %s", limit, i, got, want)
			}
		}
		// A retransmitted SYN of the first flow: it has an entry, so it is never skipped.
		dp.run(pkt{src: cli4, dst: vip4, sport: 1000, dport: 80, proto: "tcp", flags: "S"}.build(t))
		after := dp.counters()
		flows, err := dp.s.Flows()
		if err != nil {
			t.Fatal(err)
		}
		wantFlows, wantSkipped := n, 0
		if limit != 0 {
			wantFlows, wantSkipped = int(limit), n-int(limit)
		}
		if len(flows) != wantFlows {
			t.Errorf("limit %d: %d entries, want %d", limit, len(flows), wantFlows)
		}
		if got := after["conntrack_insert_skipped"].Packets - before["conntrack_insert_skipped"].Packets; got != uint64(wantSkipped) {
			t.Errorf("limit %d: conntrack_insert_skipped grew by %d, want %d", limit, got, wantSkipped)
		}
		if got := after["conntrack_miss_syn"].Packets - before["conntrack_miss_syn"].Packets; got != n+1 {
			t.Errorf("limit %d: conntrack_miss_syn grew by %d, want %d", limit, got, n+1)
		}
	}
}
