package daemon

import (
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/reconcile"
	"github.com/switchyard/switchyard/maps"
)

// The DDoS guard (docs/xdp.md, "The guard"): the configuration's global and per-VIP guards become
// the guard maps' desired state, written after every Apply with only the differences, as the QUIC
// server IDs are (quic.go).

// guardState is the guard maps' desired state for cfg, with the reconciler's VIP ids.
func (d *Daemon) guardState(cfg *config.Config) maps.GuardState {
	st := maps.GuardState{VIPs: map[uint32]maps.GuardVIP{}, Rules: map[maps.GuardRule]bool{}}
	addRules := func(scope uint16, list []string, deny bool) {
		for _, p := range config.Prefixes(list) {
			st.Rules[maps.GuardRule{Scope: scope, Prefix: p, Deny: deny}] = true
		}
	}
	if g := cfg.Guard; g != nil {
		addRules(maps.GuardScopeGlobal, g.Allow, false)
		addRules(maps.GuardScopeGlobal, g.Deny, true)
	}
	for i := range cfg.VIPs {
		v := &cfg.VIPs[i]
		e := cfg.GuardOf(v)
		if e == nil {
			continue
		}
		id, ok := d.rec.VIPID(reconcile.KeyOf(v))
		if !ok {
			continue
		}
		g := maps.GuardVIP{GlobalAllow: e.GlobalAllow, GlobalDeny: e.GlobalDeny, Allow: len(e.Allow) > 0, Deny: len(e.Deny) > 0}
		for _, p := range e.Allow {
			st.Rules[maps.GuardRule{Scope: uint16(id), Prefix: p}] = true
		}
		for _, p := range e.Deny {
			st.Rules[maps.GuardRule{Scope: uint16(id), Prefix: p, Deny: true}] = true
		}
		if s := e.PerSource; s != nil {
			g.SourcePrefix4, g.SourcePrefix6 = uint8(s.PrefixV4), uint8(s.PrefixV6)
			g.PerSource = maps.GuardLimit{Rate: s.Rate, Burst: s.Burst}
		}
		if p := e.PerVIP; p != nil {
			g.PerVIP = maps.GuardLimit{Rate: p.Rate, Burst: p.Burst}
		}
		if g != (maps.GuardVIP{}) {
			st.VIPs[id] = g
		}
	}
	return st
}

// syncGuardLocked writes the guard maps after an Apply: the differences from what it wrote last
// (read back from the maps the first time, so a restart corrects what changed meanwhile).
func (d *Daemon) syncGuardLocked(cfg *config.Config) error {
	want := d.guardState(cfg)
	have := d.guardHave
	if have == nil {
		st, err := d.set.ReadGuard()
		if err != nil {
			return err
		}
		have = &st
	}
	if err := d.set.WriteGuard(*have, want); err != nil {
		d.guardHave = nil // unknown now: read back next time
		return err
	}
	d.guardHave = &want
	return nil
}
