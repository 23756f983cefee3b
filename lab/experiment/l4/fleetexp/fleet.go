// Package fleetexp measures a fleet of L4 balancers through the real daemons: bird2
// as the router with ECMP, etcd as the shared store, `switchyard lb run` on every balancer
// (XDP, BGP, second chance), app servers behind them and real TCP keep-alive connections. It
// is `switchyard lab experiment run fleet`, and the end-to-end test asserts its figures.
package fleetexp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/bird"
	"github.com/switchyard/switchyard/lab/experiment/l4/l4load"
	"github.com/switchyard/switchyard/lab/topo"
)

// Options size a run.
type Options struct {
	// Prefix names the lab's namespaces ("" takes a fresh one); the run removes the lab.
	Prefix string
	// Conns is the number of established keep-alive connections (default 1000).
	Conns int
	// NewRate is the rate of new connections per second during the kill (default 50).
	NewRate int
	// Workers is how many requests run at once (default 100).
	Workers int
	// Log, when set, gets a line per step.
	Log func(format string, args ...any)
}

// Result holds every figure of a run.
type Result struct {
	Conns int        `json:"conns"`
	Kill  KillResult `json:"kill"`
	Join  JoinResult `json:"join"`
	// Change has the backend-added-while-a-balancer-leaves run with second chance on, then off.
	Change   []ChangeResult `json:"backend_change"`
	Drain    DrainResult    `json:"drain"`
	WatchCut WatchResult    `json:"watch_cut"`
	// Fail has the silent failures of scenario 6: SIGSTOP and link down, with BFD (lb2) and
	// without (lb3); Restart the in-place restarts of scenario 7, without BFD (lb3) and with (lb2).
	Fail    []FailResult    `json:"fail"`
	Restart []RestartResult `json:"restart"`
	Took    time.Duration   `json:"took_ns"`
}

// KillResult is scenario 1: a balancer of three killed (SIGKILL, program detached).
type KillResult struct {
	// Spread is each balancer's share of the connections before the kill (its flows).
	Spread []int `json:"spread"`
	// Withdrawn is the time from the kill until the router routes the VIPs through the others.
	Withdrawn time.Duration `json:"withdrawn_ns"`
	HoldTime  time.Duration `json:"hold_time_ns"`
	// Session is bird's state of lb3's session once the routes are withdrawn (not Established).
	Session string `json:"session"`
	// Next is the round of requests started right after the kill, on every connection.
	Next l4load.Round `json:"next"`
	// Converged is the time from the kill until the routes are withdrawn and a whole round
	// answered on every connection that did not break.
	Converged time.Duration `json:"converged_ns"`
	// New connections are opened at NewRate from 1 s before the kill until 1 s after
	// convergence: started and failed in the window (kill to convergence) and in all.
	NewRate      int           `json:"new_rate"`
	NewStarted   int           `json:"new_started"`
	NewFailed    int           `json:"new_failed"`
	NewSlowest   time.Duration `json:"new_slowest_ns"`
	NewAll       int           `json:"new_all"`
	NewAllFailed int           `json:"new_all_failed"`
}

// JoinResult is scenario 2: a fourth balancer joins a fleet of two.
type JoinResult struct {
	Routed time.Duration `json:"routed_ns"`
	// Moved is how many connections ECMP sent to the new node (its connection-table entries).
	Moved int `json:"moved"`
	// Rehashed is how many reached lb1 or lb2 without an entry there (new connection-table
	// entries): the ECMP route is hash-threshold, not consistent, so flows move between the
	// old nodes too, but here back to the node they had before lb3's kill.
	Rehashed int          `json:"rehashed"`
	Next     l4load.Round `json:"next"`
	Alive    int          `json:"alive"`
	Balancer string       `json:"balancer"`
}

// ChangeResult is scenario 3: a backend is added, then a balancer leaves (SIGKILL), in one
// second; the leaving node's flows and those ECMP re-hashes land on nodes with no entry.
type ChangeResult struct {
	SecondChance bool `json:"second_chance"`
	// Moved is how many connections reached a node that had no entry for them.
	Moved int          `json:"moved"`
	Next  l4load.Round `json:"next"`
}

// DrainResult is scenario 4: `lb drain-node` on one node.
type DrainResult struct {
	Withdrawn time.Duration `json:"withdrawn_ns"`
	Detached  time.Duration `json:"detached_ns"`
	Rounds    int           `json:"rounds"`
	Conns     int           `json:"conns"`
	Broken    int           `json:"broken"`
}

// WatchResult is scenario 5: one node's etcd traffic dropped while a backend changes.
type WatchResult struct {
	// Requests during the cut, on every connection, and how many failed.
	Requests int `json:"requests"`
	Failed   int `json:"failed"`
	// AppliedWhileCut is true if the cut node applied the change anyway (it must not).
	AppliedWhileCut bool `json:"applied_while_cut"`
	// CaughtUp is the time from the end of the cut until the node's table equals the others'.
	CaughtUp time.Duration `json:"caught_up_ns"`
}

// fleet is the running lab.
type fleet struct {
	st    *lab.State
	exe   string
	lbs   []topo.Node
	bes   []topo.Node
	o     Options
	addr  string
	be4   string
	conns []topo.Node  // clients
	p     *l4load.Pool // the established connections of scenarios 1, 2, 4 and 5
}

// Run brings up a lab of four balancers (the fourth on standby), one etcd member and four
// backends, runs the seven scenarios in turn and removes the lab.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Conns == 0 {
		o.Conns = 1000
	}
	if o.NewRate == 0 {
		o.NewRate = 50
	}
	if o.Workers == 0 {
		o.Workers = 100
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if o.Prefix == "" {
		o.Prefix = lab.TempPrefix("fl")
	}
	if err := bird.Available(); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return nil, errors.New("fleet: etcd not found: install Debian's etcd-server (make deps)")
	}
	exe, err := lab.Binary()
	if err != nil {
		return nil, err
	}
	defer lab.Destroy(o.Prefix)
	start := time.Now()
	spec := lab.Spec{Prefix: o.Prefix, Clients: 2, Balancers: 4, Backends: 4, BGP: true}
	st, err := lab.Up(lab.UpOptions{Spec: spec, Exe: exe, Balancer: lab.ModeDaemon, StoreMembers: 1, NoHealth: true, Standby: 1})
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	t := st.Lab().Topo
	f := &fleet{st: st, exe: exe, lbs: t.ByRole(topo.Balancer), bes: t.ByRole(topo.Backend), o: o,
		addr: net.JoinHostPort(lab.WebVIP4.String(), "80"), conns: t.ByRole(topo.Client)}
	f.be4 = f.bes[3].Addr4.String()
	res := &Result{Conns: o.Conns}
	steps := []func(context.Context, *Result) error{f.kill, f.join, f.drain, f.watchCut, f.change, f.failover}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if err := s(ctx, res); err != nil {
			return res, fmt.Errorf("fleet: %w", err)
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// call runs one API operation on balancer n's daemon.
func (f *fleet) call(n topo.Node, op string, req, resp any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := api.NewClient(lab.SocketPath(f.st.Prefix, n.NS)).Call(ctx, op, req, resp); err != nil {
		return fmt.Errorf("%s %s: %w", n.Name, op, err)
	}
	return nil
}

// flows is the number of connection-table entries of balancer n.
func (f *fleet) flows(n topo.Node) (int, error) {
	var st api.Stats
	err := f.call(n, api.OpStats, api.Empty{}, &st)
	return st.Flows, err
}

// ring is balancer n's Maglev table of the web VIP: digest and backends in it.
func (f *fleet) ring(n topo.Node) (string, int, error) {
	var st api.Status
	if err := f.call(n, api.OpStatus, api.Empty{}, &st); err != nil {
		return "", 0, err
	}
	for _, r := range st.Rings {
		if r.VIP == "web" {
			return r.Digest, r.InRing, nil
		}
	}
	return "", 0, nil
}

// waitRing waits until every node in ns has the web table with inRing backends, the same on
// all, and not the digest not.
func (f *fleet) waitRing(ns []topo.Node, inRing int, not string, timeout time.Duration) (string, time.Duration, error) {
	start := time.Now()
	for {
		d0, ok := "", true
		for i, n := range ns {
			d, in, err := f.ring(n)
			if err != nil {
				return "", 0, err
			}
			if i == 0 {
				d0 = d
			}
			ok = ok && d == d0 && in == inRing && d != not && d != ""
		}
		if ok {
			return d0, time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return "", 0, fmt.Errorf("the web table did not converge on %d backends on %d nodes within %s", inRing, len(ns), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// backend adds (op api.OpBackendAdd) or removes a backend of web through node n, which writes
// it to the store.
func (f *fleet) backend(n topo.Node, op, addr string) error {
	return f.call(n, op, api.BackendReq{VIP: "web", Address: addr, Weight: 1}, nil)
}

// pool opens Options.Conns connections from both clients.
func (f *fleet) pool() (*l4load.Pool, error) {
	return l4load.OpenPool(f.conns, f.addr, f.o.Conns, f.o.Workers)
}

// routes waits until the router's VIP routes go through exactly ns.
func (f *fleet) routes(ns ...topo.Node) (time.Duration, error) {
	return f.st.Lab().WaitVIPRoutes(ns, lab.BGPHoldTime+20*time.Second)
}

// bfdUp waits until every session of the nodes that run BFD has its BFD session up. A node
// killed before then is not withdrawn by BFD: bird keeps its routes through a graceful restart
// for the whole restart time (docs/fleet.md, "BFD or graceful restart").
func (f *fleet) bfdUp(ns ...topo.Node) error {
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range ns {
		for {
			var st api.Status
			if err := f.call(n, api.OpStatus, api.Empty{}, &st); err != nil {
				return err
			}
			up := st.BGP != nil
			if up {
				for _, s := range st.BGP.Sessions {
					up = up && (s.BFD == nil || s.BFD.State == "up")
				}
			}
			if up {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: BFD not up within 20s", n.Name)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}
