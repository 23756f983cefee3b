package fleetexp

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/bird"
	"github.com/switchyard/switchyard/lab/experiment/l4/l4load"
	"github.com/switchyard/switchyard/lab/topo"
)

// Scenarios 6 and 7: silent failures (a hung daemon, a dead link) with and without BFD, and
// restarts of a daemon in place (graceful restart), on a fleet of lb1..lb3 where lb1 and lb2 run
// BFD with the router (the lab's default) and lb3 does not (the per-node choice that keeps routes
// through a restart: docs/fleet.md, "BFD or graceful restart").

// Failure kinds of FailResult.
const (
	FailStop = "sigstop"   // the daemon hangs: SIGSTOP, its sessions stay open, its program forwards
	FailLink = "link-down" // the node's interface goes down on its side
)

// FailResult is one silent failure of a balancer under the established connections.
type FailResult struct {
	Kind     string `json:"kind"`
	Balancer string `json:"balancer"`
	BFD      bool   `json:"bfd"`
	// Withdrawn is the time from the failure until the router's kernel routes the VIPs through
	// the other nodes only (polled every 10 ms).
	Withdrawn time.Duration `json:"withdrawn_ns"`
	// Back is the time from the end of the failure (SIGCONT, link up) until the node is routed again.
	Back time.Duration `json:"back_ns"`
	// Conns connections made a request in every round from the failure until the node was back.
	Conns  int `json:"conns"`
	Rounds int `json:"rounds"`
	Broken int `json:"broken"`
}

// RestartResult is one daemon replaced in place (SIGKILL, then a new `lb run` that adopts the
// program) under the established connections and new ones at NewRate.
type RestartResult struct {
	Balancer string `json:"balancer"`
	BFD      bool   `json:"bfd"`
	Conns    int    `json:"conns"`
	Rounds   int    `json:"rounds"`
	Broken   int    `json:"broken"`
	// NewStarted new connections were opened from the kill until a second after the node's
	// session was up again; NewFailed of them failed.
	NewRate    int `json:"new_rate"`
	NewStarted int `json:"new_started"`
	NewFailed  int `json:"new_failed"`
	// Polls of `birdc show route for VIP` every 10 ms from the kill until the end; HopLost of them
	// had no path from the node, KernelLost readings of the router's kernel route had no next hop
	// through it; FirstLost is when the first was seen, after the kill.
	Polls      int           `json:"polls"`
	HopLost    int           `json:"hop_lost"`
	KernelLost int           `json:"kernel_lost"`
	FirstLost  time.Duration `json:"first_lost_ns,omitempty"`
	// Up is the time from the kill until bird's session with the node was established again.
	Up time.Duration `json:"up_ns"`
}

// failover runs scenarios 6 and 7 on a fresh lb1..lb3 (lb3 without BFD).
func (f *fleet) failover(_ context.Context, res *Result) error {
	lbs := f.lbs[:3]
	lb2, lb3 := lbs[1], lbs[2]
	for _, n := range f.lbs {
		if err := lab.KillBalancer(f.st, n); err != nil {
			return err
		}
	}
	for _, n := range lbs {
		if err := f.setNode(n, true, n.Name != lb3.Name); err != nil {
			return err
		}
		if err := lab.StartBalancer(f.st, f.exe, n); err != nil {
			return err
		}
	}
	if _, err := f.routes(lbs...); err != nil {
		return err
	}
	if err := f.bfdUp(lbs...); err != nil {
		return err
	}
	_, in, err := f.ring(lbs[0])
	if err != nil {
		return err
	}
	if _, _, err := f.waitRing(lbs, in, "", 20*time.Second); err != nil {
		return err
	}
	p, err := f.pool()
	if err != nil {
		return err
	}
	defer p.Close()
	for _, c := range []struct {
		kind string
		n    topo.Node
	}{{FailStop, lb2}, {FailStop, lb3}, {FailLink, lb2}, {FailLink, lb3}} {
		if err := f.bfdUp(lbs...); err != nil {
			return err
		}
		r, err := f.fail(p, c.kind, c.n, lbs)
		if err != nil {
			return fmt.Errorf("%s of %s: %w", c.kind, c.n.Name, err)
		}
		res.Fail = append(res.Fail, r)
		f.o.Log("%s of %s (bfd %v): withdrawn after %s, back %s after the end, %d of %d broken over %d rounds",
			r.Kind, r.Balancer, r.BFD, r.Withdrawn, r.Back, r.Broken, r.Conns, r.Rounds)
	}
	for _, n := range []topo.Node{lb3, lb2} {
		if err := f.bfdUp(lbs...); err != nil {
			return err
		}
		r, err := f.restart(p, n, n.Name != lb3.Name)
		if err != nil {
			return fmt.Errorf("restart of %s: %w", n.Name, err)
		}
		res.Restart = append(res.Restart, r)
		f.o.Log("restart of %s (bfd %v): %d of %d broken, %d of %d new failed, hop missing in %d of %d polls (kernel %d), up after %s",
			r.Balancer, r.BFD, r.Broken, r.Conns, r.NewFailed, r.NewStarted, r.HopLost, r.Polls, r.KernelLost, r.Up)
	}
	return nil
}

// setNode writes second chance and BFD (the lab's timers, or none) into node n's file.
func (f *fleet) setNode(n topo.Node, secondChance, bfd bool) error {
	path := lab.ConfigPath(f.st.Prefix, n.NS)
	c, err := config.Load(path)
	if err != nil {
		return err
	}
	c.SecondChance = &secondChance
	c.BGP.Peers = lab.BGPFor(f.st.Topo, n).Peers
	for i := range c.BGP.Peers {
		if !bfd {
			c.BGP.Peers[i].BFD = nil
		}
	}
	return c.Save(path)
}

// fail hangs node n (or takes its link down) with requests on every connection, until the
// router has withdrawn it and a whole round has run; then ends the failure and waits until
// the node is routed again.
func (f *fleet) fail(p *l4load.Pool, kind string, n topo.Node, all []topo.Node) (FailResult, error) {
	r := FailResult{Kind: kind, Balancer: n.Name, BFD: n.Name != all[2].Name, Conns: p.Alive()}
	set := func(failed bool) error {
		if kind == FailStop {
			return lab.PauseBalancer(f.st, n, failed)
		}
		return f.st.Topo.SetLink(n, !failed)
	}
	var others []topo.Node
	for _, o := range all {
		if o.Name != n.Name {
			others = append(others, o)
		}
	}
	t0 := time.Now()
	if err := set(true); err != nil {
		return r, err
	}
	failed := true
	defer func() {
		if failed {
			set(false)
		}
	}()
	withdrawn := make(chan error, 1)
	go func() {
		_, err := f.routes(others...)
		r.Withdrawn = time.Since(t0)
		withdrawn <- err
	}()
	tag := fmt.Sprintf("%s-%s", kind, n.Name)
	for done := false; !done; {
		r.Broken += p.Round(fmt.Sprintf("%s-%d", tag, r.Rounds), f.o.Workers).Broke
		r.Rounds++
		select {
		case err := <-withdrawn:
			if err != nil {
				return r, err
			}
			done = true
		default:
		}
	}
	r.Broken += p.Round(tag+"-withdrawn", f.o.Workers).Broke
	r.Rounds++
	failed = false
	t1 := time.Now()
	if err := set(false); err != nil {
		return r, err
	}
	if _, err := f.routes(all...); err != nil {
		return r, fmt.Errorf("after the failure ended: %w", err)
	}
	r.Back = time.Since(t1)
	r.Broken += p.Round(tag+"-back", f.o.Workers).Broke
	r.Rounds++
	return r, nil
}

// restart replaces node n's daemon in place with requests on every connection, new connections
// at NewRate, and bird's route to the web VIP polled every 10 ms for a path from n.
func (f *fleet) restart(p *l4load.Pool, n topo.Node, bfd bool) (RestartResult, error) {
	r := RestartResult{Balancer: n.Name, BFD: bfd, Conns: p.Alive(), NewRate: f.o.NewRate}
	gen := l4load.StartNewConns(f.conns[1], f.addr, f.o.NewRate, f.o.NewRate*120, 0)
	defer gen.Finish()
	t0 := time.Now()
	poll := startHopPoll(lab.BirdDir(f.st.Prefix), f.st.Topo.RouterNS, n, t0)
	defer poll.finish()
	restarted := make(chan error, 1)
	go func() { restarted <- lab.RestartBalancer(f.st, f.exe, n) }()
	tag := "restart-" + n.Name
	var up, end time.Time
	for end.IsZero() || time.Now().Before(end) {
		r.Broken += p.Round(fmt.Sprintf("%s-%d", tag, r.Rounds), f.o.Workers).Broke
		r.Rounds++
		select {
		case err := <-restarted:
			if err != nil {
				return r, err
			}
			restarted = nil
		default:
		}
		if restarted == nil && up.IsZero() && f.established(n) {
			up = time.Now()
			end = up.Add(time.Second)
		}
		if time.Since(t0) > time.Minute {
			return r, fmt.Errorf("bird's session with %s not established a minute after the restart\n%s", n.Name, lab.SessionReport(f.st, n))
		}
	}
	r.Up = up.Sub(t0)
	poll.finish()
	gen.Finish()
	r.Polls, r.HopLost, r.KernelLost, r.FirstLost = poll.counts()
	r.NewStarted, r.NewFailed, _ = gen.Count(t0, time.Now())
	return r, nil
}

// established says whether bird's session with n is up and its route is in the router's kernel.
func (f *fleet) established(n topo.Node) bool {
	ps, err := bird.Protocols(lab.BirdDir(f.st.Prefix))
	if err != nil {
		return false
	}
	for _, s := range ps {
		if s.Name == n.Name && s.Established() {
			return hasHop(f.st.Topo.RouterNS, n)
		}
	}
	return false
}

func hasHop(routerNS string, n topo.Node) bool {
	via, err := topo.RouteVia(routerNS, netip.PrefixFrom(lab.WebVIP4, 32))
	if err != nil {
		return false
	}
	for _, a := range via {
		if a == n.Addr4 {
			return true
		}
	}
	return false
}

// hopPoll reads bird's route to the web VIP and the router's kernel route every 10 ms and
// counts the readings without a path through one node.
type hopPoll struct {
	stop, done              chan struct{}
	once                    sync.Once
	polls, lost, kernelLost int
	firstLost               time.Duration
}

func startHopPoll(birdDir, routerNS string, n topo.Node, t0 time.Time) *hopPoll {
	h := &hopPoll{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
			rs, err := bird.RoutesFor(birdDir, lab.WebVIP4)
			found := false
			for _, rt := range rs {
				for _, pa := range rt.Paths {
					found = found || pa.From == n.Name
				}
			}
			h.polls++
			if err != nil || !found {
				h.lost++
				if h.firstLost == 0 {
					h.firstLost = time.Since(t0)
				}
			}
			if !hasHop(routerNS, n) {
				h.kernelLost++
			}
		}
	}()
	return h
}

func (h *hopPoll) finish() {
	h.once.Do(func() { close(h.stop) })
	<-h.done
}

// counts is read after finish.
func (h *hopPoll) counts() (polls, lost, kernelLost int, firstLost time.Duration) {
	return h.polls, h.lost, h.kernelLost, h.firstLost
}
