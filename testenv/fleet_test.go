package testenv

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/bird"
	"github.com/switchyard/switchyard/lab/experiment/l4/fleetexp"
	"github.com/switchyard/switchyard/lab/experiment/l4/l4load"
)

// fleetConns is the test's number of keep-alive connections: 1,000 as in the experiment, or
// $SWITCHYARD_FLEET_CONNS (a smaller number for a loaded machine).
func fleetConns(t *testing.T) int {
	n := 1000
	if s := os.Getenv("SWITCHYARD_FLEET_CONNS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 100 {
			t.Fatalf("SWITCHYARD_FLEET_CONNS=%q: want a number >= 100", s)
		}
		n = v
	}
	return n
}

// TestFleet runs the fleet scenarios through the real daemons (bird2 with ECMP, etcd,
// `lb run` with BGP and the store on four balancers, XDP, real TCP) and asserts their figures:
//  1. 3 balancers, lb3 killed (SIGKILL, program detached): the router withdraws it within the
//     hold time, >= 99.9% of the established connections complete their next request, and the
//     fleet converges in bounded time; new connections during the window mostly succeed.
//  2. lb4 joins: ECMP moves a share of the connections to it, and they survive (>= 99.9%).
//  3. be4 added while lb3 leaves: with second chance >= 99% survive; without it some break.
//  4. `lb drain-node`: no connection broken.
//  5. lb2's etcd watch cut: it keeps forwarding, does not apply a change meanwhile, and
//     catches up when the watch returns.
//  6. lb2 (BFD) and lb3 (no BFD) hung and cut off: withdrawn in the detection or hold time,
//     >= 99.9% survive.
//  7. lb3 (no BFD) restarted in place: its hop never leaves the router, nothing breaks.
func TestFleet(t *testing.T) {
	testutil.RequireLab(t)
	if err := bird.Available(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd not installed: apt-get install etcd-server (make deps)")
	}
	os.Setenv("SWITCHYARD_BIN", switchyardBin(t))
	prefix := uniquePrefix()
	t.Cleanup(func() {
		if err := lab.Destroy(prefix); err != nil {
			t.Errorf("destroy lab: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	n := fleetConns(t)
	r, err := fleetexp.Run(ctx, fleetexp.Options{Prefix: prefix, Conns: n, Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	checkFleetKill(t, r.Kill, n)
	j := r.Join
	if share := float64(j.Moved) / float64(j.Alive); share < 0.1 || share > 0.6 {
		t.Errorf("join: %d of %d connections moved to lb4 (%.0f%%), want about a third", j.Moved, j.Alive, 100*share)
	}
	if pct(j.Next) < 99.9 {
		t.Errorf("join: %d/%d connections answered after lb4 joined, want >= 99.9%%", j.Next.OK, j.Next.Tried)
	}
	if len(r.Change) != 2 {
		t.Fatalf("backend change: %d runs, want 2", len(r.Change))
	}
	on, off := r.Change[0], r.Change[1]
	if on.Moved < n/10 || off.Moved < n/10 {
		t.Errorf("backend change: %d and %d connections moved to a node without their entry, want at least %d", on.Moved, off.Moved, n/10)
	}
	if pct(on.Next) < 99 {
		t.Errorf("backend change with second chance: %d/%d survived, want >= 99%%", on.Next.OK, on.Next.Tried)
	}
	if off.Next.Broke == 0 {
		t.Errorf("backend change without second chance: nothing broke although %d connections moved on a changed table", off.Moved)
	}
	if d := r.Drain; d.Broken != 0 || d.Rounds < 2 {
		t.Errorf("drain-node: %d of %d connections broken over %d rounds, want none over >= 2", d.Broken, d.Conns, d.Rounds)
	}
	w := r.WatchCut
	if w.Failed != 0 || w.Requests == 0 || w.AppliedWhileCut {
		t.Errorf("watch cut: %d of %d requests failed, applied while cut: %v; want none failed, not applied", w.Failed, w.Requests, w.AppliedWhileCut)
	}
	if w.CaughtUp > 30*time.Second {
		t.Errorf("watch cut: caught up after %s, want within 30s", w.CaughtUp)
	}
	checkFleetFailover(t, r)
}

// checkFleetFailover asserts scenarios 6 and 7: a hung node and a dead link are withdrawn within
// the BFD detection time (with slack for a shared machine; the target is 300 ms) or the hold
// time, every connection survives; a node without BFD restarted in place keeps its hop at the
// router throughout with nothing broken or refused.
func checkFleetFailover(t *testing.T, r *fleetexp.Result) {
	t.Helper()
	if len(r.Fail) != 4 || len(r.Restart) != 2 {
		t.Fatalf("failover: %d failures and %d restarts, want 4 and 2", len(r.Fail), len(r.Restart))
	}
	for _, f := range r.Fail {
		limit := lab.BGPHoldTime + time.Second
		if f.BFD {
			limit = time.Second
		}
		if f.Withdrawn > limit {
			t.Errorf("%s of %s (bfd %v): withdrawn after %s, want within %s", f.Kind, f.Balancer, f.BFD, f.Withdrawn, limit)
		}
		if f.Broken*1000 > f.Conns {
			t.Errorf("%s of %s (bfd %v): %d of %d connections broken, want >= 99.9%% surviving", f.Kind, f.Balancer, f.BFD, f.Broken, f.Conns)
		}
	}
	gr := r.Restart[0]
	if gr.BFD || gr.Broken != 0 || gr.NewFailed != 0 || gr.NewStarted == 0 || gr.HopLost != 0 || gr.KernelLost != 0 || gr.Polls < 50 {
		t.Errorf("restart of %s without BFD: %+v; want 0 broken, 0 new failed, the hop in every one of >= 50 polls", gr.Balancer, gr)
	}
	if b := r.Restart[1]; b.Broken*1000 > b.Conns || b.NewFailed*20 > b.NewStarted {
		t.Errorf("restart of %s with BFD: %+v; want >= 99.9%% surviving and under 5%% of new connections failed", b.Balancer, b)
	}
}

func pct(r l4load.Round) float64 { return 100 * float64(r.OK) / float64(max(1, r.Tried)) }

func checkFleetKill(t *testing.T, k fleetexp.KillResult, n int) {
	t.Helper()
	for i, s := range k.Spread {
		if s < n/10 {
			t.Errorf("kill: lb%d carried %d of %d connections before the kill, want its ECMP share", i+1, s, n)
		}
	}
	if k.Withdrawn > k.HoldTime+2*time.Second {
		t.Errorf("kill: routes withdrawn after %s, want within the hold time %s (+2s)", k.Withdrawn, k.HoldTime)
	}
	if pct(k.Next) < 99.9 || k.Next.Tried != n {
		t.Errorf("kill: %d/%d connections completed their next request, want >= 99.9%% of %d", k.Next.OK, k.Next.Tried, n)
	}
	if strings.Contains(k.Session, "Established") || k.Session == "" {
		t.Errorf("kill: bird's session to lb3 is %q after the withdrawal, want it down", k.Session)
	}
	if k.NewAllFailed*20 > k.NewAll {
		t.Errorf("kill: %d of %d new connections around the kill failed, want under 5%%", k.NewAllFailed, k.NewAll)
	}
	if k.Converged > 20*time.Second {
		t.Errorf("kill: converged after %s, want within 20s", k.Converged)
	}
	if k.NewFailed*20 > k.NewStarted {
		t.Errorf("kill: %d of %d new connections failed during the window, want under 5%%", k.NewFailed, k.NewStarted)
	}
}
