package testenv

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/bird"
	"github.com/switchyard/switchyard/lab/topo"
)

// TestDrainNodeDeprefAgainstWithdraw measures `lb drain-node --depref` against a plain drain
// in the lab's topology (one bird2 router, ECMP over both balancers of one AS). Counted: the
// established flows that reach lb2 without an entry (lb2's connection-table growth and its
// non-SYN misses in the first round of requests after the router's route changed). What it
// shows: with --depref the router drops lb1 from its multipath route as soon as lb1's MED
// rises (bird compares MED between paths from one AS and merges only the best), and keeps
// lb1's path as a backup; the withdrawal after the wait moves nothing more. A plain drain
// moves the same flows at the withdrawal: in this topology de-preference moves as many flows as
// a withdrawal, only earlier, and keeps a path to fall back on.
func TestDrainNodeDeprefAgainstWithdraw(t *testing.T) {
	b := newBGPLab(t, 2)
	lb1, lb2 := b.lbs[0], b.lbs[1]
	const conns = 100
	flows := func(n topo.Node) int {
		var st api.Stats
		if err := b.call(t, n, api.OpStats, api.Empty{}, &st); err != nil {
			t.Fatal(err)
		}
		return st.Flows
	}
	measure := func(name string, drain api.DrainNodeReq, onLB2Only func()) (moved, misses int) {
		ka, first := openConns(t, b.l.Client(1), conns)
		f0, m0 := flows(lb2), b.nonSynMissesOf(t, lb2)
		var res api.DrainNodeResult
		start := time.Now()
		if err := b.call(t, lb1, api.OpDrainNode, drain, &res); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, func() bool {
			via := b.routeVia(t, webPrefix4)
			return len(via) == 1 && via[0] == lb2.Addr4
		}, "%s: the router's route not through lb2 only", name)
		t.Logf("%s: route through lb2 only %s after the command: %s", name, time.Since(start).Round(time.Millisecond), res.Message)
		if broken, mv := requestAll(t, ka, first, name); broken+mv != 0 {
			t.Errorf("%s: %d broken, %d answered by another backend", name, broken, mv)
		}
		moved, misses = flows(lb2)-f0, int(b.nonSynMissesOf(t, lb2)-m0)
		if onLB2Only != nil {
			onLB2Only()
		}
		testutil.Eventually(t, 30*time.Second, func() bool { return !xdpAttached(t, lb1) }, "%s: lb1 still attached", name)
		if broken, mv := requestAll(t, ka, first, name+"-after"); broken+mv != 0 {
			t.Errorf("%s after lb1 left: %d broken, %d moved", name, broken, mv)
		}
		t.Logf("%s: of %d connections, %d reached lb2 without an entry (%d non-SYN misses) when the route changed; %d more after lb1 detached",
			name, conns, moved, misses, flows(lb2)-f0-moved)
		for _, c := range ka {
			c.c.Close()
		}
		return moved, misses
	}

	wait, grace := 3*time.Second, time.Second
	dMoved, _ := measure("depref", api.DrainNodeReq{Depref: true, DeprefWait: wait, Grace: grace}, func() {
		// While de-preferred bird keeps lb1's path, with the high MED, out of the kernel route.
		rs, err := bird.RoutesAll(lab.BirdDir(b.Prefix))
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, r := range rs {
			if r.Prefix == webPrefix4.String() {
				for _, p := range r.Paths {
					paths = append(paths, fmt.Sprintf("%s med=%s primary=%v", p.From, p.BGP["med"], p.Primary))
				}
			}
		}
		t.Logf("depref: bird's paths for web: %v", paths)
		if len(paths) != 2 || !containsStr(paths, lb1.Name+" med=4294967294 primary=false") {
			t.Errorf("bird should keep lb1's de-preferred path as a backup: %v", paths)
		}
	})
	if err := lab.StartBalancer(b.State, b.bin, lb1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.l.WaitVIPRoutes(b.lbs, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	wMoved, _ := measure("withdraw", api.DrainNodeReq{Grace: grace}, nil)
	t.Logf("moved to lb2 of %d connections: depref %d, plain withdraw %d", conns, dMoved, wMoved)
	if dMoved == 0 || wMoved == 0 {
		t.Errorf("no flow moved (depref %d, withdraw %d): the measurement saw nothing", dMoved, wMoved)
	}
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
