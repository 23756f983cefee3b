package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/switchyard/switchyard/lab/experiment/l4/fleetexp"
	"github.com/switchyard/switchyard/lab/experiment/l4/l4load"
)

func init() {
	Register(Experiment{
		Name:      "fleet",
		Stop:      "l4",
		Summary:   "a fleet of L4 balancers over BGP and etcd: node killed, node joins, backend change with and without second chance, drain-node, etcd watch cut, hung node and dead link with and without BFD, in-place restart",
		NeedsRoot: true,
		Run:       runFleet,
	})
}

func runFleet(ctx context.Context, w io.Writer, opt Options) error {
	o := fleetexp.Options{Conns: 1000}
	if opt.Quick {
		o.Conns = 300
	}
	fmt.Fprintln(w, "fleet: a fleet of XDP balancers through the real daemons (bird2, etcd, XDP, real TCP; docs/fleet.md)")
	fmt.Fprintln(w, "setup: 4 balancer namespaces running `switchyard lb run` (BGP to the router, `--store` on one etcd")
	fmt.Fprintln(w, "member, second chance), lb4 on standby; the router runs bird2 with ECMP (5-tuple hash); 4 backends")
	fmt.Fprintf(w, "(be4 out of the VIP until scenario 3); %d keep-alive HTTP/1.1 connections from 2 clients, spread\n", o.Conns)
	fmt.Fprintf(w, "by ECMP; a round is one request on every connection (%d at a time). A connection counts as\n", 100)
	fmt.Fprintln(w, "surviving when its request is answered by the backend that answered its first one.")
	if opt.Quick {
		fmt.Fprintf(w, "QUICK run: %d connections instead of 1,000.\n", o.Conns)
	}
	r, err := fleetexp.Run(ctx, o)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	pct := func(x l4load.Round) string {
		return fmt.Sprintf("%d/%d (%.1f%%)", x.OK, x.Tried, 100*float64(x.OK)/float64(max(1, x.Tried)))
	}
	k, j, d, wc := r.Kill, r.Join, r.Drain, r.WatchCut
	fmt.Fprintf(w, "\n%-48s %-22s %s\n", "scenario", "established survived", "figures")
	fmt.Fprintf(w, "%-48s %-22s routes withdrawn %s (hold time %s, bird's session: %s); converged %s; new connections %d/s: %d failed of %d in the window (slowest %s), %d of %d from 1 s before to 1 s after it; spread before %v\n",
		"1. lb3 of 3 killed (SIGKILL, program detached)", pct(k.Next), ms(k.Withdrawn), k.HoldTime, k.Session, ms(k.Converged), k.NewRate, k.NewFailed, k.NewStarted, ms(k.NewSlowest), k.NewAllFailed, k.NewAll, k.Spread)
	fmt.Fprintf(w, "%-48s %-22s moved to lb4: %d of %d (%.1f%%), to lb1/lb2 without an entry there: %d; routed %s after its daemon started\n",
		"2. lb4 joins lb1+lb2", pct(j.Next), j.Moved, j.Alive, 100*float64(j.Moved)/float64(max(1, j.Alive)), j.Rehashed, ms(j.Routed))
	for _, c := range r.Change {
		name := "3. be4 added, lb3 of 3 leaves, second chance on"
		if !c.SecondChance {
			name = "3. the same, second_chance: false on every node"
		}
		fmt.Fprintf(w, "%-48s %-22s moved to a node without their entry: %d; lost: %d\n", name, pct(c.Next), c.Moved, c.Next.Broke)
	}
	fmt.Fprintf(w, "%-48s %-22s broken: %d over %d rounds; withdrawn %s, detached %s (grace 3s)\n",
		"4. lb drain-node on lb1", fmt.Sprintf("%d/%d", d.Conns-d.Broken, d.Conns), d.Broken, d.Rounds, ms(d.Withdrawn), ms(d.Detached))
	fmt.Fprintf(w, "%-48s %-22s applied while cut: %v; caught up %s after the cut ended\n",
		"5. lb2's etcd watch cut, be3's weight changed", fmt.Sprintf("%d/%d", wc.Requests-wc.Failed, wc.Requests), wc.AppliedWhileCut, ms(wc.CaughtUp))
	printFailover(w, r)
	fmt.Fprint(w, `
how to read it:
- 1: SIGKILL closes the daemon's BGP socket, so bird sees the session drop at once (no hold-time
  wait); the connections lb3 carried, and those the re-hashed ECMP route moved between lb1 and
  lb2, reach a node with no entry for them and are re-hashed on the identical Maglev table.
- 2: Linux ECMP is hash-threshold, not consistent: a third path takes a third of the flows and
  moves about a sixth more between the two old ones, here back to the node that carried them
  before lb3's kill, which still has their entries; the moved flows re-hash on the same table.
- 3: the moved flows are re-hashed on the new table (be4 in it): without second chance those
  whose slot changed break; with it the backend's decap forwards them to the previous pick.
- 5: the cut node forwards on its last table; it does not apply the change until the watch
  returns, then its ring digest equals the others'.
- 6: a hung daemon's program still forwards, a dead link forwards nothing (TCP retransmits
  until the route moves); BFD (lb2, 100 ms x 3 on both sides) withdraws in about the detection
  time, the hold timer (lb3, 3 s) in up to the hold time. The moved flows re-hash on the same
  table on the other nodes, and go back to their entries when the node returns.
- 7: a daemon replaced in place (SIGKILL, then a new lb run adopting the program). lb3 runs no
  BFD: bird keeps its routes through graceful restart, the hop never leaves. lb2 runs BFD: bird
  ends the restart when BFD times out (bird 2.0.12 takes even an AdminDown as a failure), so its
  routes leave for the restart and its flows ride the other nodes meanwhile.
`)
	fmt.Fprintf(w, "took %s\n", r.Took.Round(time.Second))
	if opt.JSON {
		return json.NewEncoder(w).Encode(map[string]any{"experiment": "fleet", "quick": opt.Quick, "result": r})
	}
	return nil
}

// printFailover prints scenarios 6 and 7 beside their targets.
func printFailover(w io.Writer, r *fleetexp.Result) {
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	for _, x := range r.Fail {
		how, target := "without BFD", "hold time 3s"
		if x.BFD {
			how, target = "BFD 100ms x 3", "target <= 300ms"
		}
		what := "6. " + x.Balancer + " hung (SIGSTOP), " + how
		if x.Kind == fleetexp.FailLink {
			what = "6. " + x.Balancer + "'s link down, " + how
		}
		fmt.Fprintf(w, "%-48s %-22s routes withdrawn %s (%s); back %s after the end; %d broken over %d rounds (target >= 99.9%%)\n",
			what, fmt.Sprintf("%d/%d", x.Conns-x.Broken, x.Conns), ms(x.Withdrawn), target, ms(x.Back), x.Broken, x.Rounds)
	}
	for _, x := range r.Restart {
		how, target := "GR, no BFD", "target: 0 broken, 0 failed new, hop never lost"
		if x.BFD {
			how, target = "GR and BFD", "BFD ends the restart: the hop leaves, flows ride the others"
		}
		lost := "hop never lost"
		if x.HopLost > 0 {
			lost = fmt.Sprintf("hop missing in %d polls from %s after the kill", x.HopLost, ms(x.FirstLost))
		}
		fmt.Fprintf(w, "%-48s %-22s broken %d over %d rounds; new connections %d/s: %d failed of %d; birdc polled every 10 ms: %d polls, %s (kernel route: %d without it); session up %s after the kill (%s)\n",
			"7. "+x.Balancer+" restarted in place, "+how, fmt.Sprintf("%d/%d", x.Conns-x.Broken, x.Conns), x.Broken, x.Rounds,
			x.NewRate, x.NewFailed, x.NewStarted, x.Polls, lost, x.KernelLost, ms(x.Up), target)
	}
}
