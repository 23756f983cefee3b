package fleetexp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/bird"
	"github.com/switchyard/switchyard/lab/experiment/l4/l4load"
	"github.com/switchyard/switchyard/lab/topo"
)

// kill is scenario 1: the pool spread over lb1..lb3, new connections at a fixed rate, lb3
// killed. It leaves lb1 and lb2 in the fleet and the pool open.
func (f *fleet) kill(_ context.Context, res *Result) error {
	lb1, lb2, lb3 := f.lbs[0], f.lbs[1], f.lbs[2]
	k := &res.Kill
	k.HoldTime, k.NewRate = lab.BGPHoldTime, f.o.NewRate
	if err := f.backend(lb1, api.OpBackendRemove, f.be4); err != nil { // scenario 3 adds it
		return err
	}
	if _, _, err := f.waitRing(f.lbs[:3], 3, "", 20*time.Second); err != nil {
		return err
	}
	p, err := f.pool()
	if err != nil {
		return err
	}
	f.p = p
	for _, n := range f.lbs[:3] {
		fl, err := f.flows(n)
		if err != nil {
			return err
		}
		k.Spread = append(k.Spread, fl)
	}
	f.o.Log("kill: %d connections over lb1..lb3 %v; new connections at %d/s; killing lb3", f.o.Conns, k.Spread, f.o.NewRate)
	gen := l4load.StartNewConns(f.conns[1], f.addr, f.o.NewRate, f.o.NewRate*90, 0)
	defer gen.Finish()
	time.Sleep(time.Second) // new connections before the kill, for the comparison
	if err := f.bfdUp(lb3); err != nil {
		return err
	}
	t0 := time.Now()
	if err := lab.KillBalancer(f.st, lb3); err != nil {
		return err
	}
	withdrawn := make(chan error, 1)
	go func() {
		_, err := f.routes(lb1, lb2)
		k.Withdrawn = time.Since(t0)
		withdrawn <- err
	}()
	k.Next = p.Round("next", f.o.Workers)
	nextEnd := time.Since(t0)
	if err := <-withdrawn; err != nil {
		return fmt.Errorf("lb3 killed: %w", err)
	}
	if k.Next.Broke == 0 {
		k.Converged = max(nextEnd, k.Withdrawn)
	}
	for k.Converged == 0 {
		if time.Since(t0) > time.Minute {
			return errors.New("lb3 killed: requests still breaking after a minute")
		}
		if r := p.Round("converge", f.o.Workers); r.Broke == 0 {
			k.Converged = time.Since(t0)
		}
	}
	ps, err := bird.Protocols(lab.BirdDir(f.st.Prefix))
	if err != nil {
		return err
	}
	for _, s := range ps {
		if s.Name == lb3.Name {
			k.Session = s.State + " " + s.Info
		}
	}
	time.Sleep(time.Second)
	gen.Finish()
	k.NewStarted, k.NewFailed, k.NewSlowest = gen.Count(t0, t0.Add(k.Converged))
	k.NewAll, k.NewAllFailed, _ = gen.Count(time.Time{}, time.Now())
	f.o.Log("kill: withdrawn after %s, next round %d/%d, converged after %s, new connections %d failed of %d",
		k.Withdrawn, k.Next.OK, k.Next.Tried, k.Converged, k.NewFailed, k.NewStarted)
	return nil
}

// join is scenario 2: lb4's daemon starts and joins lb1 and lb2.
func (f *fleet) join(_ context.Context, res *Result) error {
	lb1, lb2, lb4 := f.lbs[0], f.lbs[1], f.lbs[3]
	j := &res.Join
	j.Balancer = lb4.Name
	old, err := f.sumFlows(lb1, lb2)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := lab.StartBalancer(f.st, f.exe, lb4); err != nil {
		return err
	}
	if _, err := f.routes(lb1, lb2, lb4); err != nil {
		return fmt.Errorf("lb4 joining: %w", err)
	}
	j.Routed = time.Since(t0)
	if _, _, err := f.waitRing([]topo.Node{lb1, lb2, lb4}, 3, "", 10*time.Second); err != nil {
		return err
	}
	j.Alive = f.p.Alive()
	j.Next = f.p.Round("join", f.o.Workers)
	if j.Moved, err = f.flows(lb4); err != nil {
		return err
	}
	now, err := f.sumFlows(lb1, lb2)
	j.Rehashed = now - old
	f.o.Log("join: lb4 routed after %s, %d of %d connections moved to it (%d to lb1/lb2 without an entry there), %d/%d answered", j.Routed, j.Moved, j.Alive, j.Rehashed, j.Next.OK, j.Next.Tried)
	return err
}

// sumFlows is the number of connection-table entries of the nodes together.
func (f *fleet) sumFlows(ns ...topo.Node) (int, error) {
	sum := 0
	for _, n := range ns {
		fl, err := f.flows(n)
		if err != nil {
			return 0, err
		}
		sum += fl
	}
	return sum, nil
}

// drain is scenario 4: `lb drain-node` on lb1 with requests on every connection throughout.
func (f *fleet) drain(_ context.Context, res *Result) error {
	lb1, lb2, lb4 := f.lbs[0], f.lbs[1], f.lbs[3]
	d := &res.Drain
	d.Conns = f.p.Alive()
	const grace = 3 * time.Second
	t0 := time.Now()
	if err := f.call(lb1, api.OpDrainNode, api.DrainNodeReq{Grace: grace}, nil); err != nil {
		return err
	}
	if _, err := f.routes(lb2, lb4); err != nil {
		return fmt.Errorf("lb1 draining: %w", err)
	}
	d.Withdrawn = time.Since(t0)
	for time.Since(t0) < grace-500*time.Millisecond {
		d.Broken += f.p.Round(fmt.Sprintf("grace%d", d.Rounds), f.o.Workers).Broke
		d.Rounds++
	}
	for {
		_, err := os.Stat(lab.PinDir(lb1.NS, lb1.Iface))
		if os.IsNotExist(err) && f.call(lb1, api.OpStatus, api.Empty{}, nil) != nil {
			break
		}
		if time.Since(t0) > grace+20*time.Second {
			return errors.New("lb1 did not detach after its drain")
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.Detached = time.Since(t0)
	d.Broken += f.p.Round("drained", f.o.Workers).Broke
	d.Rounds++
	f.o.Log("drain: withdrawn after %s, detached after %s, %d rounds on %d connections, %d broken", d.Withdrawn, d.Detached, d.Rounds, d.Conns, d.Broken)
	return nil
}

// watchCut is scenario 5: lb2's etcd traffic is dropped, be3's weight changes through lb4, the
// connections keep working, and lb2 applies the change when the cut ends.
func (f *fleet) watchCut(_ context.Context, res *Result) error {
	lb2, lb4 := f.lbs[1], f.lbs[3]
	w := &res.WatchCut
	old, _, err := f.ring(lb4)
	if err != nil {
		return err
	}
	if err := lab.CutStore(lb2, true); err != nil {
		return err
	}
	cut := true
	defer func() {
		if cut {
			lab.CutStore(lb2, false)
		}
	}()
	if err := f.waitStore(lb2, false, 30*time.Second); err != nil {
		return err
	}
	if err := f.call(lb4, api.OpBackendWeight, api.BackendReq{VIP: "web", Address: f.bes[2].Addr4.String(), Weight: 2}, nil); err != nil {
		return err
	}
	if _, _, err := f.waitRing([]topo.Node{lb4}, 3, old, 10*time.Second); err != nil {
		return err
	}
	r := f.p.Round("cut", f.o.Workers)
	w.Requests, w.Failed = r.Tried, r.Broke
	d2, _, err := f.ring(lb2)
	if err != nil {
		return err
	}
	w.AppliedWhileCut = d2 != old
	cut = false
	if err := lab.CutStore(lb2, false); err != nil {
		return err
	}
	if _, w.CaughtUp, err = f.waitRing([]topo.Node{lb2, lb4}, 3, old, 60*time.Second); err != nil {
		return fmt.Errorf("lb2 after its watch returned: %w", err)
	}
	f.o.Log("watch cut: %d requests, %d failed; caught up %s after the cut ended", w.Requests, w.Failed, w.CaughtUp)
	return nil
}

// waitStore waits until node n's store status says connected (or not).
func (f *fleet) waitStore(n topo.Node, connected bool, timeout time.Duration) error {
	for start := time.Now(); time.Since(start) < timeout; time.Sleep(100 * time.Millisecond) {
		var st api.Status
		if err := f.call(n, api.OpStatus, api.Empty{}, &st); err != nil {
			return err
		}
		if st.Store != nil && st.Store.Connected == connected {
			return nil
		}
	}
	return fmt.Errorf("%s's store connected=%v not reached within %s", n.Name, connected, timeout)
}

// change is scenario 3, with second chance on and then off.
func (f *fleet) change(_ context.Context, res *Result) error {
	f.p.Close()
	for _, sc := range []bool{true, false} {
		c, err := f.changeOnce(sc)
		if err != nil {
			return fmt.Errorf("backend change, second_chance=%v: %w", sc, err)
		}
		res.Change = append(res.Change, c)
		f.o.Log("backend change, second_chance=%v: %d connections moved, %d/%d answered", sc, c.Moved, c.Next.OK, c.Next.Tried)
	}
	return nil
}

// changeOnce restarts the fleet as lb1..lb3 with second_chance sc, opens a pool on three
// backends, adds be4 and kills lb3.
func (f *fleet) changeOnce(sc bool) (ChangeResult, error) {
	c := ChangeResult{SecondChance: sc}
	lb1, lb2, lb3 := f.lbs[0], f.lbs[1], f.lbs[2]
	for _, n := range f.lbs {
		if err := lab.KillBalancer(f.st, n); err != nil {
			return c, err
		}
	}
	for _, n := range f.lbs[:3] {
		if err := setSecondChance(lab.ConfigPath(f.st.Prefix, n.NS), sc); err != nil {
			return c, err
		}
		if err := lab.StartBalancer(f.st, f.exe, n); err != nil {
			return c, err
		}
	}
	if _, err := f.routes(f.lbs[:3]...); err != nil {
		return c, err
	}
	if _, in, err := f.ring(lb1); err != nil {
		return c, err
	} else if in == 4 {
		if err := f.backend(lb1, api.OpBackendRemove, f.be4); err != nil {
			return c, err
		}
	}
	d3, _, err := f.waitRing(f.lbs[:3], 3, "", 20*time.Second)
	if err != nil {
		return c, err
	}
	p, err := f.pool()
	if err != nil {
		return c, err
	}
	defer p.Close()
	before, err := f.sumFlows(lb1, lb2)
	if err != nil {
		return c, err
	}
	if err := f.backend(lb1, api.OpBackendAdd, f.be4); err != nil {
		return c, err
	}
	if _, _, err := f.waitRing(f.lbs[:3], 4, d3, 20*time.Second); err != nil {
		return c, err
	}
	if err := f.bfdUp(lb3); err != nil {
		return c, err
	}
	if err := lab.KillBalancer(f.st, lb3); err != nil {
		return c, err
	}
	if _, err := f.routes(lb1, lb2); err != nil {
		return c, err
	}
	c.Next = p.Round("change", f.o.Workers)
	after, err := f.sumFlows(lb1, lb2)
	c.Moved = after - before
	return c, err
}

func setSecondChance(path string, on bool) error {
	c, err := config.Load(path)
	if err != nil {
		return err
	}
	c.SecondChance = &on
	return c.Save(path)
}
