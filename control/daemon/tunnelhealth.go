package daemon

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf/link"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/health"
	"github.com/switchyard/switchyard/loader"
)

// tunnelProbes is what health checks through the tunnel need (docs/xdp.md, "Health checks
// through the tunnel"): the TC program on the balanced interface's egress that encapsulates
// marked probe packets, loaded when a configuration first asks for it and kept until the daemon
// ends, and one mark per probed backend address, stable while the backend stays.
type tunnelProbes struct {
	enc   *loader.ProbeEncap
	lnk   link.Link
	marks map[netip.Addr]uint32
	free  []uint32 // released mark indexes, reused first
	next  uint32   // the lowest index never used
}

// needsTunnel reports whether a configuration has a health check in tunnel mode.
func needsTunnel(c *config.Config) bool {
	for i := range c.VIPs {
		if c.VIPs[i].Health != nil && c.HealthModeOf(&c.VIPs[i]) == config.HealthTunnel {
			return true
		}
	}
	return false
}

// prepareProbesLocked loads and attaches the probe encapsulator when next needs it and it is not
// there yet. Its error refuses the configuration: without the program a marked probe would reach
// the VIP untunnelled (through the router and this balancer) and pass for the wrong reason.
func (d *Daemon) prepareProbesLocked(next *config.Config) error {
	if d.tp.enc != nil || !needsTunnel(next) {
		return nil
	}
	enc, err := loader.OpenProbeEncap(d.fwd.Objs.Config)
	if err != nil {
		return fmt.Errorf("health checks through the tunnel: %w (or set health_mode: direct)", err)
	}
	lnk, err := enc.Attach(next.Interface)
	if err != nil {
		enc.Close()
		return fmt.Errorf("health checks through the tunnel: %w", err)
	}
	d.tp.enc, d.tp.lnk = enc, lnk
	d.log.Info("probe encapsulator attached", "egress", next.Interface)
	return nil
}

// closeProbes takes the probe encapsulator off the interface.
func (d *Daemon) closeProbes() {
	if d.tp.lnk != nil {
		d.tp.lnk.Close()
	}
	if d.tp.enc != nil {
		d.tp.enc.Close()
	}
	d.tp = tunnelProbes{}
}

// markFor is the probe mark of a backend address, allocated on first use.
func (tp *tunnelProbes) markFor(a netip.Addr) (uint32, bool) {
	if m, ok := tp.marks[a]; ok {
		return m, true
	}
	var idx uint32
	switch {
	case len(tp.free) > 0:
		idx, tp.free = tp.free[len(tp.free)-1], tp.free[:len(tp.free)-1]
	case tp.next+1 < loader.ProbeMaxTargets:
		tp.next++
		idx = tp.next
	default:
		return 0, false
	}
	if tp.marks == nil {
		tp.marks = map[netip.Addr]uint32{}
	}
	m := loader.ProbeMarkBase | idx
	tp.marks[a] = m
	return m, true
}

// tunnelSpec makes s a tunnel probe of VIP v through backend a, or reports why it cannot be one.
func (d *Daemon) tunnelSpec(s *health.Spec, v *config.VIP, a netip.Addr) bool {
	m, ok := d.tp.markFor(a)
	if !ok {
		d.log.Error("health check through the tunnel: more backends than probe marks; probing directly", "vip", v.Name, "backend", a, "max", loader.ProbeMaxTargets-1)
		return false
	}
	s.Mode, s.Target, s.Mark, s.Device = health.ModeTunnel, netip.AddrPortFrom(v.Addr(), s.Addr.Port()), m, d.cfg.Interface
	return true
}

// syncProbeTargetsLocked releases the marks of backends no tunnel check uses any more and writes
// the mark -> backend map of the encapsulator.
func (d *Daemon) syncProbeTargetsLocked(want map[health.Key]health.Spec) {
	used := map[netip.Addr]bool{}
	for k, s := range want {
		if s.Mode == health.ModeTunnel {
			used[k.Backend] = true
		}
	}
	targets := make(map[uint32]netip.Addr, len(used))
	for a, m := range d.tp.marks {
		if !used[a] {
			delete(d.tp.marks, a)
			d.tp.free = append(d.tp.free, m&^loader.ProbeMarkMask)
			continue
		}
		targets[m] = a
	}
	if d.tp.enc == nil {
		return
	}
	if err := d.tp.enc.SetTargets(targets); err != nil {
		d.log.Error("write probe targets: tunnel health checks of new backends fail until the next change", "err", err)
	}
}

// tunnelCounters reads the encapsulator's counters (nil when it is not loaded).
func (d *Daemon) tunnelCounters() map[string]uint64 {
	d.mu.Lock()
	enc := d.tp.enc
	d.mu.Unlock()
	if enc == nil {
		return nil
	}
	c, err := enc.Counters()
	if err != nil {
		return nil
	}
	out := make(map[string]uint64, len(c))
	for name, v := range c {
		out[name] = v.Packets
	}
	return out
}
