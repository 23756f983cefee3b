package daemon

import (
	stdmaps "maps"
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
	for i := range cfg.VIPs {
		rv, keys, sts := desiredVIP(cfg, &cfg.VIPs[i], healthy, drainExpired)
		for j, k := range keys {
			states[k] = sts[j]
		}
		out = append(out, rv)
	}
	return out, states
}

// desiredVIP is Desired for one VIP: its reconcile input, and its backends' keys and states.
func desiredVIP(cfg *config.Config, v *config.VIP, healthy func(health.Key) bool, drainExpired func(health.Key) bool) (reconcile.VIP, []health.Key, []backendState) {
	policy := cfg.AllBackendsDown
	keys := make([]health.Key, len(v.Backends))
	up := make([]bool, len(v.Backends))
	anyUp := false
	for j, b := range v.Backends {
		keys[j] = health.Key{VIP: v.Name, Backend: b.Addr()}
		up[j] = healthy(keys[j])
		anyUp = anyUp || (up[j] && !b.Drained)
	}
	keepAll := !anyUp && policy != config.AllDownDrop
	rv := reconcile.VIP{Key: reconcile.KeyOf(v), Flags: reconcile.FlagsOf(v), RingSize: cfg.VIPRingSize(v), Backends: make([]reconcile.Backend, 0, len(v.Backends))}
	sts := make([]backendState, len(v.Backends))
	for j, b := range v.Backends {
		k, h := keys[j], up[j]
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
		sts[j] = st
		rv.Backends = append(rv.Backends, reconcile.Backend{Addr: k.Backend, Weight: b.Weight, InRing: st.inRing})
	}
	return rv, keys, sts
}

// desiredCache is Desired kept up to date across changes: a VIP whose configuration is equal to
// the last one computed, with no health change, check change or drain expiry since (epoch),
// keeps its reconcile input and its entries of the states map. A change then costs one VIP's
// work, not 65,536 backends' at 4,096 VIPs of 16. The states map is updated in place (callers
// read it under the daemon's lock).
type desiredCache struct {
	epoch  uint64
	policy string
	rings  [2]any // ring_size and ring_sizing: every VIP's ring size follows them
	vips   map[string]*vipMemo
	states map[health.Key]backendState
	pass   uint64 // counts the computations: a memo of another pass is of a VIP gone
}

type vipMemo struct {
	cfg   config.VIP
	epoch uint64
	rv    reconcile.VIP
	keys  []health.Key
	pass  uint64
}

// invalidate makes every VIP's state be computed again at the next apply (health changed).
func (c *desiredCache) invalidate() { c.epoch++ }

func (d *Daemon) desiredLocked(cfg *config.Config) ([]reconcile.VIP, map[health.Key]backendState) {
	c := &d.desired
	rings := [2]any{cfg.RingSize, cfg.RingSizing}
	if c.vips == nil || c.policy != cfg.AllBackendsDown || c.rings != rings {
		*c = desiredCache{epoch: c.epoch + 1, policy: cfg.AllBackendsDown, rings: rings, vips: map[string]*vipMemo{}, states: map[health.Key]backendState{}}
	}
	out := make([]reconcile.VIP, 0, len(cfg.VIPs))
	c.pass++
	seen := 0
	for i := range cfg.VIPs {
		v := &cfg.VIPs[i]
		m := c.vips[v.Name]
		if m == nil || m.epoch != c.epoch || !m.cfg.Equal(*v) {
			if m != nil {
				c.drop(m)
			}
			rv, keys, sts := desiredVIP(cfg, v, d.hm.Healthy, d.drainExpiredLocked)
			for j, k := range keys {
				c.states[k] = sts[j]
			}
			m = &vipMemo{cfg: *v, epoch: c.epoch, rv: rv, keys: keys} // never changed in place (config.CloneForChange)
			c.vips[v.Name] = m
		}
		if m.pass != c.pass {
			m.pass = c.pass
			seen++
		}
		out = append(out, m.rv)
	}
	if seen != len(c.vips) {
		for name, m := range c.vips {
			if m.pass != c.pass {
				c.drop(m)
				delete(c.vips, name)
			}
		}
	}
	return out, c.states
}

func (c *desiredCache) drop(m *vipMemo) {
	for _, k := range m.keys {
		delete(c.states, k)
	}
}

func (d *Daemon) drainExpiredLocked(k health.Key) bool {
	dr, ok := d.drains[k]
	return ok && dr.expired
}

// switchToLocked makes next the running configuration: health checks, then the maps. When the
// maps refuse it, the previous configuration is put back and applied again, so a failed change or
// reload leaves the running state as it was.
func (d *Daemon) switchToLocked(next *config.Config) (reconcile.Result, error) {
	if err := d.prepareProbesLocked(next); err != nil {
		return reconcile.Result{}, err
	}
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
	want, states := d.desiredLocked(cfg)
	res, err := d.rec.Apply(want)
	if err != nil {
		d.counts.applyErrors++
		d.announceLocked(cfg, nil, false)
		return res, err
	}
	if err := d.syncQUICLocked(cfg, states); err != nil {
		d.counts.applyErrors++
		return res, err
	}
	if err := d.syncGuardLocked(cfg); err != nil {
		d.counts.applyErrors++
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
			if !b.Drained {
				continue
			}
			k := health.Key{VIP: v.Name, Backend: b.Addr()}
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
	for i := range d.cfg.VIPs {
		v := &d.cfg.VIPs[i]
		h := v.Health
		if h == nil {
			continue
		}
		tunnel := d.cfg.HealthModeOf(v) == config.HealthTunnel
		for _, b := range v.Backends {
			a := b.Addr()
			s := health.Spec{
				Type: h.Type, Addr: netip.AddrPortFrom(a, h.Port), Path: h.Path, ExpectStatus: h.ExpectStatus,
				Interval: h.Interval.D(), Timeout: h.Timeout.D(), Rise: h.Rise, Fall: h.Fall,
			}
			if tunnel {
				d.tunnelSpec(&s, v, a)
			}
			want[health.Key{VIP: v.Name, Backend: a}] = s
		}
	}
	d.syncProbeTargetsLocked(want) // the marks' targets before the probes that use them
	d.hm.Sync(want)
	if !stdmaps.Equal(want, d.healthSpecs) {
		d.desired.invalidate() // checks came or went: backends' health may read otherwise
		d.healthSpecs = want
	}
}

// onHealth rebuilds the rings after a backend changed state.
func (d *Daemon) onHealth(ch health.Change) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.counts.healthChanges++
	d.desired.invalidate()
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
	d.desired.invalidate() // drained, no longer draining
	for _, k := range due {
		d.counts.drainsExpired++
		i, err := d.cfg.FindVIP(k.VIP)
		if err != nil {
			continue // the VIP went away meanwhile; its flows went with it
		}
		vipID, okV := d.rec.VIPID(reconcile.KeyOf(&d.cfg.VIPs[i]))
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
		if id, ok := d.rec.VIPID(reconcile.KeyOf(&cfg.VIPs[i])); ok {
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
