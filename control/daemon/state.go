package daemon

import (
	"net/netip"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/health"
	"github.com/switchyard/switchyard/control/reconcile"
	"github.com/switchyard/switchyard/maps"
)

// backendState is the computed state of one backend of one VIP.
type backendState struct {
	state   string
	inRing  bool
	healthy bool
}

// Desired computes the reconcile input and the state of every backend from a configuration,
// the health of each backend (healthy reports it; unchecked backends are healthy) and the
// all_backends_down policy. It is a pure function, unit-tested without maps.
func Desired(cfg *config.Config, healthy func(health.Key) bool, drainExpired func(health.Key) bool) ([]reconcile.VIP, map[health.Key]backendState) {
	out := make([]reconcile.VIP, 0, len(cfg.VIPs))
	n := 0
	for i := range cfg.VIPs {
		n += len(cfg.VIPs[i].Backends)
	}
	states := make(map[health.Key]backendState, n)
	// One address parse and one health lookup a backend: this runs at every change, over every
	// VIP (65,536 backends at 4,096 VIPs of 16).
	addrs, up := make([]netip.Addr, 0, 64), make([]bool, 0, 64)
	for i := range cfg.VIPs {
		v := &cfg.VIPs[i]
		addrs, up = addrs[:0], up[:0]
		anyUp := false
		for _, b := range v.Backends {
			a := parseAddr(b.Address)
			h := healthy(health.Key{VIP: v.Name, Backend: a})
			addrs, up = append(addrs, a), append(up, h)
			anyUp = anyUp || (h && !b.Drained)
		}
		keepAll := !anyUp && cfg.AllBackendsDown != config.AllDownDrop
		rv := reconcile.VIP{Key: v.Key(), Flags: v.Flags(), Backends: make([]reconcile.Backend, 0, len(v.Backends))}
		for j, b := range v.Backends {
			a := addrs[j]
			k := health.Key{VIP: v.Name, Backend: a}
			h := up[j]
			st := backendState{healthy: h}
			switch {
			case b.Drained && drainExpired != nil && drainExpired(k):
				st.state = api.StateDrained
			case b.Drained:
				st.state = api.StateDraining
			case h:
				st.state, st.inRing = api.StateActive, true
			case keepAll:
				st.state, st.inRing = api.StateAllDownKept, true
			default:
				st.state = api.StateUnhealthy
			}
			states[k] = st
			rv.Backends = append(rv.Backends, reconcile.Backend{Addr: a, Weight: b.Weight, InRing: st.inRing})
		}
		out = append(out, rv)
	}
	return out, states
}

func (d *Daemon) drainExpiredLocked(k health.Key) bool {
	dr, ok := d.drains[k]
	return ok && dr.expired
}

// switchToLocked makes next the running configuration: health checks, then the maps. When the
// maps refuse it, the previous configuration is put back and applied again, so a failed change or
// reload leaves the running state as it was.
func (d *Daemon) switchToLocked(next *config.Config) (reconcile.Result, error) {
	old := d.cfg
	d.cfg = next
	d.syncHealthLocked()
	res, err := d.applyLocked(next)
	if err != nil {
		d.cfg = old
		d.syncHealthLocked()
		if _, rerr := d.applyLocked(old); rerr != nil {
			d.log.Error("restore the running state after a failed configuration change", "err", rerr)
		}
	}
	return res, err
}

// applyLocked reconciles the maps to cfg and keeps the drain timers in step.
func (d *Daemon) applyLocked(cfg *config.Config) (reconcile.Result, error) {
	if cfg != d.warned {
		for _, w := range cfg.Warnings() {
			d.log.Warn("configuration", "warning", w)
		}
		d.warned = cfg
	}
	want, states := Desired(cfg, d.hm.Healthy, d.drainExpiredLocked)
	res, err := d.rec.Apply(want)
	if err != nil {
		d.counts.applyErrors++
		d.announceLocked(cfg, nil, false)
		return res, err
	}
	d.announceLocked(cfg, states, true)
	d.counts.rebuilds += uint64(res.RingsRebuilt)
	d.counts.slots += uint64(res.SlotsWritten)
	// Drain timers: start for newly drained backends, forget undrained or removed ones.
	seen := map[health.Key]bool{}
	now := time.Now()
	for _, v := range cfg.VIPs {
		for _, b := range v.Backends {
			k := health.Key{VIP: v.Name, Backend: parseAddr(b.Address)}
			if !b.Drained {
				continue
			}
			seen[k] = true
			if d.drains[k] == nil {
				d.drains[k] = &drain{start: now}
			}
		}
	}
	for k := range d.drains {
		if !seen[k] {
			delete(d.drains, k)
		}
	}
	if res.Changed() {
		d.log.Debug("maps reconciled", "vips_added", res.VIPsAdded, "vips_removed", res.VIPsRemoved,
			"backends_added", res.BackendsAdded, "backends_removed", res.BackendsRemoved,
			"rings_rebuilt", res.RingsRebuilt, "slots_written", res.SlotsWritten)
	}
	return res, nil
}

// syncHealthLocked makes the running checks those of the configuration.
func (d *Daemon) syncHealthLocked() {
	want := map[health.Key]health.Spec{}
	for _, v := range d.cfg.VIPs {
		h := v.Health
		if h == nil {
			continue
		}
		for _, b := range v.Backends {
			a := parseAddr(b.Address)
			want[health.Key{VIP: v.Name, Backend: a}] = health.Spec{
				Type: h.Type, Addr: netip.AddrPortFrom(a, h.Port), Path: h.Path, ExpectStatus: h.ExpectStatus,
				Interval: h.Interval.D(), Timeout: h.Timeout.D(), Rise: h.Rise, Fall: h.Fall,
			}
		}
	}
	d.hm.Sync(want)
}

// onHealth rebuilds the rings after a backend changed state.
func (d *Daemon) onHealth(ch health.Change) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts.healthChanges++
	res, err := d.applyLocked(d.cfg)
	if ch.Healthy {
		d.log.Info("backend healthy", "vip", ch.Key.VIP, "backend", ch.Key.Backend, "slots_written", res.SlotsWritten)
	} else {
		d.log.Warn("backend unhealthy", "vip", ch.Key.VIP, "backend", ch.Key.Backend, "err", ch.Err, "slots_written", res.SlotsWritten)
	}
	if err != nil {
		d.log.Error("rebuild after health change", "err", err)
	}
}

// expireDrains cuts the remaining flows of backends drained for longer than drain_timeout:
// only that VIP's flows to the backend (connection-table entries carry their VIP id), so the same
// address keeps serving the other VIPs that list it.
func (d *Daemon) expireDrains(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	timeout := d.cfg.DrainTimeout.D()
	var due []health.Key
	for k, dr := range d.drains {
		if !dr.expired && now.Sub(dr.start) >= timeout {
			dr.expired = true
			due = append(due, k)
		}
	}
	if len(due) == 0 {
		return
	}
	for _, k := range due {
		d.counts.drainsExpired++
		i, err := d.cfg.FindVIP(k.VIP)
		if err != nil {
			continue // the VIP went away meanwhile; its flows went with it
		}
		vipID, okV := d.rec.VIPID(d.cfg.VIPs[i].Key())
		id, okB := d.rec.BackendID(k.Backend)
		if !okV || !okB {
			continue
		}
		// Out of the previous ring first: a cut flow's next packet must not be sent on to the
		// drained backend by second chance.
		if _, err := d.rec.DropFromPrevious(vipID, id); err != nil {
			d.log.Error("drain timeout: previous ring", "vip", k.VIP, "backend", k.Backend, "err", err)
			continue
		}
		n, err := d.set.DeleteFlows(vipID, id)
		if err != nil {
			d.log.Error("drain timeout: cut flows", "vip", k.VIP, "backend", k.Backend, "err", err)
			continue
		}
		d.log.Info("drain timeout: remaining flows cut", "vip", k.VIP, "backend", k.Backend, "flows", n)
	}
}

// flowCounts counts active flows per VIP name and backend id, and all entries. An entry is
// attributed to the VIP id the forwarder recorded in it.
func (d *Daemon) flowCounts(cfg *config.Config) (map[string]map[uint32]int, int) {
	out := map[string]map[uint32]int{}
	flows, _ := d.set.Flows()
	byID := map[uint32]string{}
	for i := range cfg.VIPs {
		if id, ok := d.rec.VIPID(cfg.VIPs[i].Key()); ok {
			byID[id] = cfg.VIPs[i].Name
		}
	}
	idle, udp := cfg.FlowIdle.D(), cfg.UDPTimeout.D()
	for _, f := range flows {
		if f.Closing || f.Idle > idle || (f.Proto == maps.UDP && f.Idle > udp) {
			continue
		}
		name, ok := byID[f.VIPID]
		if !ok {
			continue
		}
		if out[name] == nil {
			out[name] = map[uint32]int{}
		}
		out[name][f.Backend]++
	}
	return out, len(flows)
}

// vipOfFlow finds the VIP a flow was balanced by: its exact port, else the all-ports VIP.
func vipOfFlow(byKey map[maps.VIPKey]string, f maps.Flow) (string, bool) {
	k := maps.VIPKey{Addr: f.Dst.Addr().Unmap(), Port: f.Dst.Port(), Proto: f.Proto}
	if n, ok := byKey[k]; ok {
		return n, true
	}
	k.Port = 0
	n, ok := byKey[k]
	return n, ok
}
