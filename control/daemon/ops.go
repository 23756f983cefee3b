package daemon

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/health"
	"github.com/switchyard/switchyard/control/reconcile"
	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/maps"
)

// ops maps every API operation to its handler.
func (d *Daemon) ops() map[string]api.Handler {
	return map[string]api.Handler{
		api.OpStatus:         api.Handle(func(_ context.Context, _ api.Empty) (api.Status, error) { return d.Status(), nil }),
		api.OpVIPList:        api.Handle(func(_ context.Context, _ api.Empty) ([]api.VIPInfo, error) { return d.VIPList() }),
		api.OpVIPAdd:         api.Handle(func(_ context.Context, r api.VIPAdd) (api.ChangeResult, error) { return d.VIPAdd(r.VIP) }),
		api.OpVIPRemove:      api.Handle(func(_ context.Context, r api.VIPRef) (api.ChangeResult, error) { return d.VIPRemove(r.VIP) }),
		api.OpVIPBGP:         api.Handle(func(_ context.Context, r api.VIPBGPReq) (api.ChangeResult, error) { return d.VIPSetBGP(r) }),
		api.OpBackendList:    api.Handle(func(_ context.Context, r api.VIPRef) ([]api.BackendInfo, error) { return d.BackendList(r.VIP) }),
		api.OpBackendAdd:     api.Handle(func(_ context.Context, r api.BackendReq) (api.ChangeResult, error) { return d.BackendAdd(r) }),
		api.OpBackendRemove:  api.Handle(func(_ context.Context, r api.BackendReq) (api.ChangeResult, error) { return d.BackendRemove(r) }),
		api.OpBackendDrain:   api.Handle(func(_ context.Context, r api.BackendReq) (api.ChangeResult, error) { return d.BackendDrain(r, true) }),
		api.OpBackendUndrain: api.Handle(func(_ context.Context, r api.BackendReq) (api.ChangeResult, error) { return d.BackendDrain(r, false) }),
		api.OpBackendWeight:  api.Handle(func(_ context.Context, r api.BackendReq) (api.ChangeResult, error) { return d.BackendWeight(r) }),
		api.OpHealth:         api.Handle(func(_ context.Context, _ api.Empty) ([]api.HealthInfo, error) { return d.Health(), nil }),
		api.OpStats:          api.Handle(func(_ context.Context, _ api.Empty) (api.Stats, error) { return d.Stats() }),
		api.OpFlow:           api.Handle(func(_ context.Context, r api.FlowReq) (api.FlowInfo, error) { return d.Flow(r) }),
		api.OpConfigSave:     api.Handle(func(_ context.Context, r api.SaveReq) (api.SaveResult, error) { return d.Save(r.Path) }),
		api.OpConfigReload:   api.Handle(func(_ context.Context, _ api.Empty) (api.ChangeResult, error) { return d.Reload() }),
		api.OpDrainNode:      api.Handle(func(_ context.Context, r api.DrainNodeReq) (api.DrainNodeResult, error) { return d.DrainNode(r) }),
		api.OpGuardList:      api.Handle(func(_ context.Context, _ api.Empty) (api.GuardInfo, error) { return d.GuardList() }),
		api.OpGuardAdd:       api.Handle(func(_ context.Context, r api.GuardRuleReq) (api.ChangeResult, error) { return d.GuardAdd(r) }),
		api.OpGuardRemove:    api.Handle(func(_ context.Context, r api.GuardRuleReq) (api.ChangeResult, error) { return d.GuardRemove(r) }),
		api.OpGuardLimit:     api.Handle(func(_ context.Context, r api.GuardLimitReq) (api.ChangeResult, error) { return d.GuardLimit(r) }),
	}
}

// Status describes the daemon.
func (d *Daemon) Status() api.Status {
	linkID, progID := d.ids()
	bs := d.bgpStatus() // reads the sessions outside the lock
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, v := range d.cfg.VIPs {
		n += len(v.Backends)
	}
	st := api.Status{Interface: d.cfg.Interface, XDPMode: d.cfg.XDPMode, PinDir: d.cfg.PinDir, Config: d.opt.ConfigPath,
		LinkID: linkID, ProgramID: progID, Adopted: d.adopted, VIPs: len(d.cfg.VIPs), Backends: n, Started: d.started, Version: d.opt.Version, BGP: bs}
	if d.nhOK {
		st.Gateway, st.NextHopMAC, st.IfMAC, st.MTU = d.nh.Gateway.String(), d.nh.NextHopMAC.String(), d.nh.IfMAC.String(), d.nh.MTU
	}
	if d.cfg.MTU != 0 {
		st.MTU = d.cfg.MTU
	}
	st.Rings, st.Store = d.ringDigestsLocked(), d.storeStatusLocked()
	return st
}

// change applies a mutation of the configuration: validated, reconciled, then persisted. Any
// error leaves the running state as it was.
func (d *Daemon) change(mut func(c *config.Config) (string, error)) (api.ChangeResult, error) {
	if d.store != nil {
		return d.storeChange(mut)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	next := d.cfg.CloneForChange() // mutators change VIPs through findVIP (MutableVIP) only
	msg, err := mut(next)
	if err != nil {
		return api.ChangeResult{}, err
	}
	if err := next.ValidateChange(d.cfg); err != nil {
		return api.ChangeResult{}, &api.Error{Status: http.StatusBadRequest, Msg: err.Error()}
	}
	res, err := d.switchToLocked(next)
	if err != nil {
		return api.ChangeResult{}, &api.Error{Status: http.StatusInternalServerError, Msg: err.Error()}
	}
	out := api.ChangeResult{Message: msg, SlotsWritten: res.SlotsWritten}
	d.log.Info("change applied", "change", msg, "slots_written", res.SlotsWritten)
	if d.opt.ConfigPath != "" {
		if err := d.saver.Save(next, d.opt.ConfigPath); err != nil {
			d.log.Error("persist change", "err", err)
			out.Message += fmt.Sprintf(" (NOT saved: %v; run `switchyard lb config save --path FILE`)", err)
		} else {
			out.Saved = d.opt.ConfigPath
		}
	}
	return out, nil
}

// findVIP finds a VIP of a configuration being changed and gives it backends of its own, so
// that changing it leaves the running configuration's as they are (config.CloneForChange).
func findVIP(c *config.Config, ref string) (*config.VIP, error) {
	i, err := c.FindVIP(ref)
	if err != nil {
		return nil, api.NotFound(err)
	}
	return c.MutableVIP(i), nil
}

func findBackend(c *config.Config, vip, addr string) (*config.VIP, *config.Backend, error) {
	v, err := findVIP(c, vip)
	if err != nil {
		return nil, nil, err
	}
	j, err := v.FindBackend(addr)
	if err != nil {
		return nil, nil, api.NotFound(err)
	}
	return v, &v.Backends[j], nil
}

// VIPAdd adds a VIP.
func (d *Daemon) VIPAdd(v config.VIP) (api.ChangeResult, error) {
	return d.change(func(c *config.Config) (string, error) {
		c.VIPs = append(c.VIPs, v)
		v.ApplyDefaults()
		return fmt.Sprintf("vip %s (%s) added with %d backends", v.Name, reconcile.KeyOf(&v), len(v.Backends)), nil
	})
}

// VIPSetBGP replaces a VIP's bgp section (every VIP on its address with it: they share one
// prefix, so validation wants their sections equal).
func (d *Daemon) VIPSetBGP(r api.VIPBGPReq) (api.ChangeResult, error) {
	return d.change(func(c *config.Config) (string, error) {
		v, err := findVIP(c, r.VIP)
		if err != nil {
			return "", err
		}
		addr, names := v.Addr(), []string{}
		for i := range c.VIPs {
			if c.VIPs[i].Addr() == addr {
				w := c.MutableVIP(i)
				w.BGP = r.BGP.Clone()
				names = append(names, w.Name)
			}
		}
		if r.BGP == nil {
			return fmt.Sprintf("bgp section of vip %s removed (announced by every node with the node's policy)", strings.Join(names, ", ")), nil
		}
		return fmt.Sprintf("bgp section of vip %s set", strings.Join(names, ", ")), nil
	})
}

// VIPRemove removes a VIP and its backends.
func (d *Daemon) VIPRemove(ref string) (api.ChangeResult, error) {
	return d.change(func(c *config.Config) (string, error) {
		i, err := c.FindVIP(ref)
		if err != nil {
			return "", api.NotFound(err)
		}
		name := c.VIPs[i].Name
		c.VIPs = append(c.VIPs[:i], c.VIPs[i+1:]...)
		return fmt.Sprintf("vip %s removed", name), nil
	})
}

// BackendAdd adds a backend to a VIP.
func (d *Daemon) BackendAdd(r api.BackendReq) (api.ChangeResult, error) {
	return d.change(func(c *config.Config) (string, error) {
		v, err := findVIP(c, r.VIP)
		if err != nil {
			return "", err
		}
		a, err := netip.ParseAddr(r.Address)
		if err != nil {
			return "", fmt.Errorf("invalid backend address %q: give an IPv4 or IPv6 address such as 198.18.3.1", r.Address)
		}
		if _, err := v.FindBackend(r.Address); err == nil {
			return "", fmt.Errorf("backend %s already in vip %s: use `switchyard backend weight` or `undrain` to change it", a, v.Name)
		}
		w := r.Weight
		if w == 0 {
			w = 1
		}
		v.Backends = append(v.Backends, config.Backend{Address: a.Unmap().String(), Weight: w, ServerID: r.ServerID})
		if r.ServerID != 0 {
			return fmt.Sprintf("backend %s added to vip %s with weight %d and QUIC server id %d", a, v.Name, w, r.ServerID), nil
		}
		return fmt.Sprintf("backend %s added to vip %s with weight %d", a, v.Name, w), nil
	})
}

// BackendRemove removes a backend from a VIP; flows still on it re-hash (unless another VIP
// keeps the address).
func (d *Daemon) BackendRemove(r api.BackendReq) (api.ChangeResult, error) {
	return d.change(func(c *config.Config) (string, error) {
		v, err := findVIP(c, r.VIP)
		if err != nil {
			return "", err
		}
		j, err := v.FindBackend(r.Address)
		if err != nil {
			return "", api.NotFound(err)
		}
		v.Backends = append(v.Backends[:j], v.Backends[j+1:]...)
		return fmt.Sprintf("backend %s removed from vip %s", r.Address, v.Name), nil
	})
}

// BackendDrain drains (or undrains) a backend.
func (d *Daemon) BackendDrain(r api.BackendReq, drained bool) (api.ChangeResult, error) {
	return d.change(func(c *config.Config) (string, error) {
		v, b, err := findBackend(c, r.VIP, r.Address)
		if err != nil {
			return "", err
		}
		b.Drained = drained
		if drained {
			return fmt.Sprintf("backend %s of vip %s draining: no new flow; established ones continue for up to %s", b.Address, v.Name, c.DrainTimeout.D()), nil
		}
		return fmt.Sprintf("backend %s of vip %s undrained: takes new flows again", b.Address, v.Name), nil
	})
}

// BackendWeight sets a backend's weight.
func (d *Daemon) BackendWeight(r api.BackendReq) (api.ChangeResult, error) {
	if r.Weight == 0 {
		return api.ChangeResult{}, fmt.Errorf("weight 0: give a weight of 1 or more; to take a backend out use `switchyard backend drain`")
	}
	return d.change(func(c *config.Config) (string, error) {
		v, b, err := findBackend(c, r.VIP, r.Address)
		if err != nil {
			return "", err
		}
		b.Weight = r.Weight
		return fmt.Sprintf("backend %s of vip %s weight %d", b.Address, v.Name, r.Weight), nil
	})
}

// Save writes the running configuration to path (default: the file it came from). A daemon
// started without a file adopts path as its file.
func (d *Daemon) Save(path string) (api.SaveResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if path == "" {
		path = d.opt.ConfigPath
	}
	if path == "" {
		return api.SaveResult{}, fmt.Errorf("save: the daemon was started without --config: give a file with --path")
	}
	if err := d.nodeConfigLocked().Save(path); err != nil {
		return api.SaveResult{}, err
	}
	if d.opt.ConfigPath == "" {
		// Started without --config: the saved file becomes the one later changes go to and
		// reloads read.
		d.opt.ConfigPath = path
	}
	d.log.Info("configuration saved", "path", path)
	return api.SaveResult{Path: path}, nil
}

// VIPList lists the VIPs.
func (d *Daemon) VIPList() ([]api.VIPInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, states := Desired(d.cfg, d.hm.Healthy, d.drainExpiredLocked)
	out := make([]api.VIPInfo, 0, len(d.cfg.VIPs))
	digests := map[string]string{}
	for _, r := range d.ringDigestsLocked() {
		digests[r.VIP] = r.Digest
	}
	for _, v := range d.cfg.VIPs {
		id, _ := d.rec.VIPID(reconcile.KeyOf(&v))
		in := 0
		for _, b := range v.Backends {
			if states[health.Key{VIP: v.Name, Backend: b.Addr()}].inRing {
				in++
			}
		}
		out = append(out, api.VIPInfo{Name: v.Name, Address: v.Address, Port: v.Port, Protocol: v.Protocol, Hash: v.Hash,
			ID: id, Health: v.Health, Backends: len(v.Backends), InRing: in, RingDigest: digests[v.Name]})
	}
	return out, nil
}

// BackendList lists the backends of one VIP, or of all when ref is empty.
func (d *Daemon) BackendList(ref string) ([]api.BackendInfo, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cfg := d.cfg
	only := ""
	if ref != "" {
		i, err := cfg.FindVIP(ref) // the running configuration: read, not changed
		if err != nil {
			return nil, api.NotFound(err)
		}
		only = cfg.VIPs[i].Name
	}
	_, states := Desired(cfg, d.hm.Healthy, d.drainExpiredLocked)
	flows, _ := d.flowCounts(cfg)
	out := []api.BackendInfo{}
	for _, v := range cfg.VIPs {
		if only != "" && v.Name != only {
			continue
		}
		vid, _ := d.rec.VIPID(reconcile.KeyOf(&v))
		ring, _ := d.rec.Ring(vid)
		shares := maglev.Shares(ring)
		for _, b := range v.Backends {
			a := b.Addr()
			k := health.Key{VIP: v.Name, Backend: a}
			st := states[k]
			id, _ := d.rec.BackendID(a)
			bi := api.BackendInfo{VIP: v.Name, Address: a.String(), ID: id, Weight: b.Weight, State: st.state,
				InRing: st.inRing, Health: d.healthWord(k), HealthMode: d.healthMode(k), ActiveFlows: flows[v.Name][id],
				ServerID: d.quicServerID(&v, b, id)}
			if len(ring) > 0 {
				bi.RingShare = float64(shares[id]) / float64(len(ring))
			}
			if dr := d.drains[k]; dr != nil && !dr.expired {
				bi.DrainLeft = max(0, cfg.DrainTimeout.D()-time.Since(dr.start))
			}
			if st.state == api.StateDraining && bi.ActiveFlows == 0 {
				bi.State = api.StateDrained
			}
			out = append(out, bi)
		}
	}
	return out, nil
}

func (d *Daemon) healthWord(k health.Key) string {
	st, ok := d.hm.Status(k)
	switch {
	case !ok:
		return "unchecked"
	case !st.Checked:
		return "pending"
	case st.Healthy:
		return "healthy"
	}
	return "unhealthy"
}

// healthMode is the mode of a backend's check ("" when it has none).
func (d *Daemon) healthMode(k health.Key) string {
	if s, ok := d.healthSpecs[k]; ok {
		return s.ProbeMode()
	}
	return ""
}

// Health lists every check.
func (d *Daemon) Health() []api.HealthInfo {
	specs := d.hm.Specs()
	out := make([]api.HealthInfo, 0, len(specs))
	for k, s := range specs {
		st, _ := d.hm.Status(k)
		out = append(out, api.HealthInfo{VIP: k.VIP, Backend: k.Backend.String(), Check: s.Describe(), Mode: s.ProbeMode(), Healthy: st.Healthy,
			Checked: st.Checked, Successes: st.Successes, Failures: st.Failures, LastError: st.LastError, Since: st.Since})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].VIP != out[j].VIP {
			return out[i].VIP < out[j].VIP
		}
		return out[i].Backend < out[j].Backend
	})
	return out
}

// Flow explains which backend a flow gets.
func (d *Daemon) Flow(r api.FlowReq) (api.FlowInfo, error) {
	proto, err := maps.ParseProto(r.Proto)
	if err != nil {
		return api.FlowInfo{}, err
	}
	src, err := netip.ParseAddrPort(r.Src)
	if err != nil {
		return api.FlowInfo{}, fmt.Errorf("invalid client %q: give address:port such as 198.18.0.5:40000 or [fd00::5]:40000", r.Src)
	}
	dst, err := netip.ParseAddrPort(r.Dst)
	if err != nil {
		return api.FlowInfo{}, fmt.Errorf("invalid destination %q: give the VIP as address:port such as 198.18.100.1:80", r.Dst)
	}
	f := maps.Flow{Src: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), Dst: netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()), Proto: proto}
	if f.Src.Addr().Is4() != f.Dst.Addr().Is4() {
		return api.FlowInfo{}, fmt.Errorf("client %s and VIP %s are of different address families", src, dst)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	byKey := map[maps.VIPKey]string{}
	for i := range d.cfg.VIPs {
		byKey[reconcile.KeyOf(&d.cfg.VIPs[i])] = d.cfg.VIPs[i].Name
	}
	name, ok := vipOfFlow(byKey, f)
	if !ok {
		return api.FlowInfo{}, api.NotFound(fmt.Errorf("no VIP matches %s/%s: the forwarder passes this packet to the kernel (see `switchyard vip list`)", dst, proto))
	}
	vi, _ := d.cfg.FindVIP(name)
	v := d.cfg.VIPs[vi]
	id, _ := d.rec.VIPID(reconcile.KeyOf(&v))
	ring, err := d.rec.Ring(id)
	if err != nil {
		return api.FlowInfo{}, err
	}
	info := api.FlowInfo{Flow: f.String(), VIP: name, Slot: maps.Slot(f, reconcile.FlagsOf(&v), uint32(len(ring)))}
	ringID := ring[info.Slot]
	if a, ok := d.rec.BackendAddr(ringID); ok && ringID != 0 {
		info.RingBackend = a.String()
	}
	e, tracked, err := d.set.LookupFlow(f)
	if err != nil {
		return info, err
	}
	cfgNow := d.cfg
	expired := tracked && proto == maps.UDP && e.Idle > cfgNow.UDPTimeout.D()
	if a, ok := d.rec.BackendAddr(e.Backend); tracked && ok && !expired {
		info.Tracked, info.Closing, info.Idle = true, e.Closing, e.Idle
		info.Backend, info.BackendID, info.Reason = a.String(), e.Backend, "connection table"
		if e.Unconfirmed {
			info.Reason = "unconfirmed table (SYN seen, no other packet yet)"
		}
		if a2, ok := d.rec.BackendAddr(e.SecondChance); ok && e.SecondChance != 0 {
			info.SecondChance = a2.String()
		}
		if e.Backend != ringID {
			info.Note = fmt.Sprintf("the ring now maps this flow to %s; the established flow stays on %s, a new connection (SYN) from this 5-tuple would move", orNone(info.RingBackend), a)
		}
		return info, nil
	}
	if ringID == 0 {
		info.Reason = "no backend"
		info.Note = "the VIP's ring is empty (every backend drained, or down with all_backends_down: drop): packets are dropped"
		return info, nil
	}
	info.Backend, info.BackendID, info.Reason = info.RingBackend, ringID, "maglev slot"
	if tracked {
		info.Note = "a connection-table entry exists but no longer applies (backend removed or UDP timeout): the next packet re-hashes"
	}
	if reconcile.FlagsOf(&v).QUIC() {
		info.Note = joinNote(info.Note, quicFlowNote)
	}
	return info, nil
}

func orNone(s string) string {
	if s == "" {
		return "no backend"
	}
	return s
}
