package lab

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/topo"
)

// TestDemoLiveScreen: every live redraw keeps the legend (the load, said to be the total, and
// the route of every target), labels the per-backend rates as averaged and shows each stop's
// own counters.
func TestDemoLiveScreen(t *testing.T) {
	st := &State{Balancer: ModeDaemon, Topo: &topo.Topology{}, Running: map[string]string{}}
	be := topo.Node{Name: "be1", Role: topo.Backend}
	targets := []Target{{Name: "web", URL: "http://198.18.100.1:80", Route: "XDP VIP -> app (DSR)"}}
	v := &view{st: st, targets: targets, load: "100 requests/s in total, shared by 2 clients x 4 workers", hosts: []topo.Node{be}, smooth: map[string]float64{"be1": 33}}
	now := time.Now()
	v.first = map[string]app.Counters{"be1": {Requests: 0}}
	v.prev, v.cur = map[string]app.Counters{"be1": {Requests: 100}}, map[string]app.Counters{"be1": {Requests: 140, Open: 2}}
	v.prevT, v.curT, v.startT = now.Add(-time.Second), now, now.Add(-10*time.Second)
	v.stops[0] = stopTotals{lbPackets: map[string]float64{"web": 0}, l7Requests: map[string]float64{"reads": 0}}
	v.stops[1] = stopTotals{lbPackets: map[string]float64{"web": 1000}, l7Requests: map[string]float64{"reads": 100}, edgeHits: 10, edgeMisses: 10, dnsQueries: 4}
	v.stops[2] = stopTotals{lbPackets: map[string]float64{"web": 1500}, l7Requests: map[string]float64{"reads": 130}, edgeHits: 40, edgeMisses: 20, dnsQueries: 6, lbFlows: 12}
	v.stopsDT, v.hasSamples = 1, true
	stats := map[string]*sent{"web": {}}
	stats["web"].ok.Store(1000)
	for i := 0; i < 2; i++ { // the second redraw too
		var b bytes.Buffer
		v.render(&b, 10*time.Second, stats, true)
		out := b.String()
		for _, want := range []string{"load: 100 requests/s in total", "web   http://198.18.100.1:80", "XDP VIP -> app (DSR)",
			"REQ/S averaged over 5s", "be1", "33.0", "balancer  XDP packets/s by VIP: web 500; 12 connection-table entries",
			"l7        requests/s by pool: reads 30.0", "edge      hits/s 30.0, misses/s 10.0, hit ratio 75%", "dns       queries/s 2.0",
			"clients (sent since the start): web ok=1000 failed=0"} {
			if !strings.Contains(out, want) {
				t.Errorf("redraw %d lacks %q:\n%s", i, want, out)
			}
		}
	}
	var b bytes.Buffer
	v.summary(&b, 10*time.Second, stats)
	for _, want := range []string{"summary after 10s: 1000 requests answered 200, 0 failed", "app servers (requests during the demo): be1 140 (100%)",
		"balancer  XDP packets/s by VIP: web 150", "(average over the demo)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// TestSmoothRate: a backend whose measured rate jumps from 0 to 100 requests/s reaches about
// 63% of it after one time constant, not at once.
func TestSmoothRate(t *testing.T) {
	r := smoothRate(0, false, 0, 1)
	for i := 0; i < int(smoothing.Seconds()); i++ {
		r = smoothRate(r, true, 100, 1)
	}
	if math.Abs(r-63.2) > 1 {
		t.Errorf("after %s at 100/s: %.1f, want about 63", smoothing, r)
	}
	if smoothRate(0, false, 42, 1) != 42 {
		t.Error("the first measurement does not start the average")
	}
}

// TestH3Report: the migration's line says whether every step came through one L7 instance.
func TestH3Report(t *testing.T) {
	same := H3Report{Steps: []H3Step{{"198.18.1.11:1000", "l7a", "be1"}, {"198.18.1.11:2000", "l7a", "be2"}}, Routed: 1}
	if !same.SameL7() || !strings.Contains(same.String(), "the same L7 instance after every move: 198.18.1.11:1000 -> l7a (be1), moved to 198.18.1.11:2000 -> l7a (be2); the balancer routed 1 packets") {
		t.Errorf("one instance: %s", same)
	}
	moved := H3Report{Steps: []H3Step{{"a", "l7a", "be1"}, {"b", "l7b", "be1"}}, Routed: -1}
	if moved.SameL7() || !strings.Contains(moved.String(), "NOT the same L7 instance") || strings.Contains(moved.String(), "routed") {
		t.Errorf("two instances, no daemon: %s", moved)
	}
	if (H3Report{}).SameL7() {
		t.Error("no step counts as one instance")
	}
}
