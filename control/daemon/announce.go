package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/bgp"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/health"
	"github.com/switchyard/switchyard/loader"
)

// announcer is the daemon's BGP state, nil without a bgp section. Its fields are guarded by the
// daemon's mu; the speaker has its own lock and never blocks the daemon (Set returns at once).
type announcer struct {
	sp       *bgp.Speaker
	routerID netip.Addr
	// attached is set once the program is attached; mapsOK after each reconcile.
	attached, mapsOK bool
	draining         bool
	drainEnd         time.Time
	// depref is set while `lb drain-node --depref` announces every prefix with bgp.depref_med
	// before the withdrawal.
	depref bool
	// detach is set when the drain's grace period is over: Run detaches on its way out.
	detach bool
	// last is the input of the last good reconcile, kept to recompute on readiness changes.
	lastCfg    *config.Config
	lastStates map[health.Key]backendState
	vips       []api.VIPAnnouncement
	drained    chan struct{}
}

// startBGP starts the speaker when the configuration has a bgp section. It announces nothing
// until the node is ready; a router that never answers delays nothing.
func (d *Daemon) startBGP() error {
	b := d.cfg.BGP
	if b == nil {
		return nil
	}
	iface := d.cfg.Interface
	opt := bgp.Options{ASN: b.ASN, Logger: d.log,
		RouterID:    orAddr(parseAddr(b.RouterID), interfaceAddr(iface, true)),
		NextHop4:    orAddr(parseAddr(b.NextHop), interfaceAddr(iface, true)),
		NextHop6:    orAddr(parseAddr(b.NextHop6), interfaceAddr(iface, false)),
		RestartTime: b.RestartTime(),
	}
	if !opt.RouterID.IsValid() {
		return fmt.Errorf("start bgp: %s has no IPv4 address to use as router id: set bgp.router_id", iface)
	}
	for _, p := range b.Peers {
		bp := bgp.Peer{Addr: parseAddr(p.Address), ASN: p.ASN, Port: p.Port, HoldTime: p.HoldTime.D(), Password: p.Password}
		if f := p.BFD; f != nil {
			bp.BFD = &bgp.BFD{MinRx: f.MinRx.D(), MinTx: f.MinTx.D(), Multiplier: uint8(f.Multiplier)}
		}
		opt.Peers = append(opt.Peers, bp)
	}
	for _, p := range opt.Peers {
		if p.BFD != nil && opt.RestartTime > 0 {
			// bird (2.0.12) ends a graceful restart when BFD goes down, AdminDown included.
			d.log.Info("bgp: BFD on this peer: a router running BFD withdraws this node when lb run restarts, graceful restart or not; leave bfd out on this node to keep its routes through restarts (docs/fleet.md, \"BFD or graceful restart\")", "peer", p.Addr)
		}
	}
	sp, err := bgp.Start(opt)
	if err != nil {
		return err
	}
	d.bgp = &announcer{sp: sp, routerID: opt.RouterID, drained: make(chan struct{})}
	d.log.Info("bgp speaker started (dials the routers once the program is attached, listens on no port)", "asn", b.ASN,
		"router_id", opt.RouterID, "peers", len(b.Peers), "next_hop", opt.NextHop4, "next_hop6", opt.NextHop6,
		"graceful_restart", opt.RestartTime)
	return nil
}

func orAddr(a, def netip.Addr) netip.Addr {
	if a.IsValid() {
		return a
	}
	return def
}

// stopBGP withdraws what is left and closes the sessions.
func (d *Daemon) stopBGP() {
	if d.bgp != nil {
		d.bgp.sp.Stop()
	}
}

// registerBGP exports the speaker's switchyard_l4_bgp_* metrics.
func (d *Daemon) registerBGP(reg *prometheus.Registry) {
	if d.bgp != nil {
		reg.MustRegister(d.bgp.sp)
	}
}

// runContext is the context of the daemon's servers. With BGP it does not end with the caller's:
// a stop request drains first (withdraw, grace, detach) while the socket, metrics and health
// checks keep serving; stopChan tells the main loop when to return.
func (d *Daemon) runContext(parent context.Context) (context.Context, context.CancelFunc) {
	if d.bgp == nil {
		return context.WithCancel(parent)
	}
	return context.WithCancel(context.WithoutCancel(parent))
}

// stopChan is closed when Run should return: at once when parent ends without BGP (today's
// behaviour: the program stays attached), after the drain with BGP.
func (d *Daemon) stopChan(parent context.Context) <-chan struct{} {
	if d.bgp == nil {
		return parent.Done()
	}
	go func() {
		select {
		case <-parent.Done():
			if _, err := d.DrainNode(api.DrainNodeReq{}); err != nil {
				d.log.Error("drain on stop", "err", err)
			}
		case <-d.bgp.drained:
		}
	}()
	return d.bgp.drained
}

// stopMessage is logged when Run returns.
func (d *Daemon) stopMessage() string {
	if d.bgp != nil {
		return "stopping after the drain: detaching the program and removing its pins"
	}
	return "stopping; the program stays attached and the maps pinned (`switchyard lb detach` removes them)"
}

// markAttached makes the node ready once its program is attached, then dials the routers with
// the announcements already in the local RIB. A daemon that adopted a running program restarts
// gracefully: the program forwarded throughout, so it says so (Restart State and Forwarding State),
// and a router that kept its routes keeps forwarding until End-of-RIB.
func (d *Daemon) markAttached() error {
	if d.bgp == nil {
		return nil
	}
	d.mu.Lock()
	d.bgp.attached = true
	d.refreshAnnounceLocked()
	d.mu.Unlock()
	restarting := d.adopted && d.cfg.BGP.RestartTime() > 0
	if restarting {
		d.log.Info("bgp: graceful restart: the program kept forwarding; re-announcing with the restart flag, then End-of-RIB")
	}
	return d.bgp.sp.Connect(restarting)
}

// announceLocked is called after every reconcile with its outcome: the backends' states of a
// reconcile that succeeded, or mapsOK false when the maps refused it (no announcement until the
// next good one: the maps may hold half a change).
func (d *Daemon) announceLocked(cfg *config.Config, states map[health.Key]backendState, mapsOK bool) {
	a := d.bgp
	if a == nil {
		return
	}
	a.mapsOK = mapsOK
	if mapsOK {
		a.lastCfg, a.lastStates = cfg, states
	}
	d.refreshAnnounceLocked()
}

func (d *Daemon) refreshAnnounceLocked() {
	a := d.bgp
	notReady := ""
	switch {
	case a.draining:
		notReady = "node draining"
	case !a.attached:
		notReady = "node not ready: program not attached yet"
	case !a.mapsOK:
		notReady = "node not ready: the last reconcile of the maps failed"
	}
	var prefixes map[netip.Prefix]bgp.Attrs
	a.vips, prefixes = Announcements(a.lastCfg, a.lastStates, notReady)
	if a.depref {
		// lb drain-node --depref: every path with the highest MED first, the withdrawal later.
		med := d.cfg.BGP.DeprefMED
		for p, at := range prefixes {
			at.MED = &med
			prefixes[p] = at
		}
	}
	a.sp.Set(prefixes)
}

// Announcements decides what a node announces: the /32 or /128 of every VIP address with at
// least one active backend (healthy, not drained) whose announce_from includes this node
// (cfg.BGP's node and labels), with the VIP's route policy on this node; nothing while notReady
// says why. Several VIPs on one address share its prefix (validation makes their bgp sections
// equal). It is a pure function, unit-tested without BGP.
func Announcements(cfg *config.Config, states map[health.Key]backendState, notReady string) ([]api.VIPAnnouncement, map[netip.Prefix]bgp.Attrs) {
	if cfg == nil {
		return nil, nil
	}
	var node config.Node
	if cfg.BGP != nil {
		node = cfg.BGP.NodeID()
	}
	up := map[netip.Prefix]string{}
	attrs := map[netip.Prefix]bgp.Attrs{}
	out := make([]api.VIPAnnouncement, 0, len(cfg.VIPs))
	for i := range cfg.VIPs {
		v := &cfg.VIPs[i]
		a := v.Addr()
		p := netip.PrefixFrom(a, a.BitLen())
		active := false
		for _, b := range v.Backends {
			if states[health.Key{VIP: v.Name, Backend: b.Addr()}].state == api.StateActive {
				active = true
			}
		}
		pol := v.Policy(cfg.BGP, node)
		va := api.VIPAnnouncement{VIP: v.Name, Prefix: p.String(), State: api.AnnounceNo, Policy: describePolicy(pol)}
		switch {
		case notReady != "":
			va.Reason = notReady
		case !v.Announces(node):
			va.Reason = fmt.Sprintf("announce_from %v does not include this node (%s)", v.BGP.AnnounceFrom, describeNode(node))
		case !active:
			va.Reason = "no healthy backend"
		default:
			va.State, va.Reason = api.AnnounceYes, "ready, healthy backends"
			if _, ok := up[p]; !ok {
				up[p], attrs[p] = v.Name, policyAttrs(pol)
			}
		}
		out = append(out, va)
	}
	for i := range out {
		if by, ok := up[netip.MustParsePrefix(out[i].Prefix)]; ok && out[i].State == api.AnnounceNo {
			out[i].Reason += fmt.Sprintf(" (the prefix stays announced for vip %s)", by)
		}
	}
	return out, attrs
}

// policyAttrs turns a validated route policy into the speaker's attributes.
func policyAttrs(p config.RoutePolicy) bgp.Attrs {
	a := bgp.Attrs{LocalPref: p.LocalPref, MED: p.MED}
	for _, c := range p.Communities {
		v, _ := config.ParseCommunity(c) // validated
		a.Communities = append(a.Communities, v)
	}
	for _, c := range p.LargeCommunities {
		v, _ := config.ParseLargeCommunity(c) // validated
		a.LargeCommunities = append(a.LargeCommunities, [3]uint32{v.Global, v.Local1, v.Local2})
	}
	return a
}

// describePolicy renders a policy for `lb status` ("" when empty).
func describePolicy(p config.RoutePolicy) string {
	var parts []string
	if len(p.Communities) > 0 {
		parts = append(parts, "communities "+strings.Join(p.Communities, " "))
	}
	if len(p.LargeCommunities) > 0 {
		parts = append(parts, "large "+strings.Join(p.LargeCommunities, " "))
	}
	if p.LocalPref != nil {
		parts = append(parts, fmt.Sprintf("local_pref %d", *p.LocalPref))
	}
	if p.MED != nil {
		parts = append(parts, fmt.Sprintf("med %d", *p.MED))
	}
	return strings.Join(parts, ", ")
}

func describeNode(n config.Node) string {
	if len(n.Labels) == 0 {
		return n.Name
	}
	return n.Name + ", labels " + strings.Join(n.Labels, " ")
}

// DrainNode withdraws every VIP at once, keeps forwarding for the grace period (0:
// bgp.drain_grace), then ends the daemon, which detaches the program on its way out. With
// Depref it first announces every VIP with bgp.depref_med for DeprefWait (a router prefers the
// other nodes' lower MED and takes this one out of its multipath set, keeping it as a backup),
// then withdraws. A second call reports the drain under way.
func (d *Daemon) DrainNode(r api.DrainNodeReq) (api.DrainNodeResult, error) {
	a := d.bgp
	if a == nil {
		return api.DrainNodeResult{}, &api.Error{Status: http.StatusBadRequest,
			Msg: "drain-node: this daemon has no bgp section, so it announces nothing to withdraw: remove its routes at the router, stop it, then `lb detach`"}
	}
	if r.DeprefWait < 0 || r.Grace < 0 {
		return api.DrainNodeResult{}, &api.Error{Status: http.StatusBadRequest, Msg: "drain-node: --grace and --depref-wait must be positive"}
	}
	grace := r.Grace
	if grace <= 0 {
		grace = d.cfg.BGP.DrainGrace.D()
	}
	d.mu.Lock()
	if a.draining || a.depref {
		end := a.drainEnd
		d.mu.Unlock()
		return api.DrainNodeResult{Message: "already draining: detaching at " + end.Format(time.RFC3339), DetachAt: end}, nil
	}
	if !r.Depref || r.DeprefWait == 0 {
		res := d.withdrawLocked(grace)
		d.mu.Unlock()
		d.flushDrain(&res)
		return res, nil
	}
	a.depref, a.drainEnd = true, time.Now().Add(r.DeprefWait+grace)
	d.refreshAnnounceLocked()
	end := a.drainEnd
	d.mu.Unlock()
	if err := a.sp.Flush(); err != nil {
		d.log.Error("drain: de-preference", "err", err)
	}
	med := d.cfg.BGP.DeprefMED
	prefixes := a.sp.Announced()
	d.log.Info("drain: VIPs announced with the de-preference MED; withdrawing after the wait", "med", med, "prefixes", len(prefixes), "wait", r.DeprefWait)
	go func() {
		time.Sleep(r.DeprefWait)
		d.mu.Lock()
		res := d.withdrawLocked(grace)
		d.mu.Unlock()
		d.flushDrain(&res)
	}()
	return api.DrainNodeResult{Grace: grace, DetachAt: end,
		Message: fmt.Sprintf("de-preferred: %d prefixes announced with MED %d; withdrawing them in %s, then forwarding the established flows for %s, then the program is detached and the daemon exits",
			len(prefixes), med, r.DeprefWait, grace)}, nil
}

// withdrawLocked starts the drain proper: everything withdrawn, the detach timer started.
func (d *Daemon) withdrawLocked(grace time.Duration) api.DrainNodeResult {
	a := d.bgp
	withdrawn := a.sp.Announced()
	a.draining, a.depref, a.drainEnd = true, false, time.Now().Add(grace)
	d.refreshAnnounceLocked()
	res := api.DrainNodeResult{Grace: grace, DetachAt: a.drainEnd}
	for _, p := range withdrawn {
		res.Withdrawn = append(res.Withdrawn, p.String())
	}
	res.Message = fmt.Sprintf("draining: %d prefixes withdrawn; established flows keep being forwarded for %s, then the program is detached and the daemon exits", len(withdrawn), grace)
	go func() {
		time.Sleep(grace)
		d.mu.Lock()
		a.detach = true
		d.mu.Unlock()
		close(a.drained)
	}()
	return res
}

// flushDrain sends the withdrawal out (outside the daemon lock) and logs it.
func (d *Daemon) flushDrain(res *api.DrainNodeResult) {
	if err := d.bgp.sp.Flush(); err != nil {
		d.log.Error("drain: withdraw", "err", err)
	}
	d.log.Info("drain: VIPs withdrawn; forwarding the established flows until the grace period ends", "withdrawn", res.Withdrawn, "grace", res.Grace)
}

// detachIfDrained removes the program and its pins after a completed drain (Run's last step,
// once every handle is closed).
func (d *Daemon) detachIfDrained() {
	if d.bgp == nil {
		return
	}
	d.mu.Lock()
	detach := d.bgp.detach
	d.mu.Unlock()
	if !detach {
		return
	}
	if err := loader.Detach(d.cfg.PinDir); err != nil {
		d.log.Error("drain: detach", "err", err)
		return
	}
	d.log.Info("drain: program detached and pins removed", "pin_dir", d.cfg.PinDir)
}

// bgpStatus is the BGP part of `lb status`; the sessions are read outside the daemon lock.
func (d *Daemon) bgpStatus() *api.BGPStatus {
	a := d.bgp
	if a == nil {
		return nil
	}
	d.mu.Lock()
	st := &api.BGPStatus{ASN: d.cfg.BGP.ASN, RouterID: a.routerID.String(), Ready: a.attached && a.mapsOK && !a.draining,
		Draining: a.draining, Depref: a.depref, VIPs: append([]api.VIPAnnouncement(nil), a.vips...)}
	if a.draining || a.depref {
		st.DrainLeft = max(time.Until(a.drainEnd), 0).Round(time.Millisecond)
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ss, err := a.sp.Sessions(ctx)
	if err != nil {
		d.log.Warn("bgp status", "err", err)
	}
	for _, s := range ss {
		se := api.BGPSession{Peer: s.Peer, ASN: s.ASN, State: s.State, Established: s.Established,
			Uptime: s.Uptime, PrefixesSent: s.PrefixesSent, UpdatesSent: s.UpdatesSent, HoldTime: s.HoldTime,
			GracefulRestart: s.GracefulRestart, RestartTime: s.RestartTime, LastDownReason: s.LastDownReason}
		if b := s.BFD; b != nil {
			se.BFD = &api.BGPBFD{State: b.State, Failures: b.Failures, Sent: b.Sent, Received: b.Received, DetectTime: b.DetectTime}
		}
		st.Sessions = append(st.Sessions, se)
	}
	st.Announced = []string{}
	for _, p := range a.sp.Announced() {
		st.Announced = append(st.Announced, p.String())
	}
	return st
}

// bgpFixed refuses a reload that changes the bgp section: sessions are set up at start.
func bgpFixed(cur, next *config.Config) error {
	if (cur.BGP == nil) != (next.BGP == nil) || (cur.BGP != nil && !reflect.DeepEqual(*cur.BGP, *next.BGP)) {
		return errors.New("bgp changed: the sessions are set up at start: restart `lb run` (drain the node first with `lb drain-node`); put it back to reload the rest")
	}
	return nil
}
