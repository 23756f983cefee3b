package daemon

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
)

// GuardList describes the guard: the rules and limits as configured, and the counters.
func (d *Daemon) GuardList() (api.GuardInfo, error) {
	c, err := d.set.GuardCounters()
	if err != nil {
		return api.GuardInfo{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	out := api.GuardInfo{Global: d.cfg.Guard.Clone(), VIPs: map[string]*config.Guard{}, Counters: c}
	for i := range d.cfg.VIPs {
		if g := d.cfg.VIPs[i].Guard; !g.Empty() {
			out.VIPs[d.cfg.VIPs[i].Name] = g.Clone()
		}
	}
	return out, nil
}

// guardOf is the guard a change edits: the VIP's (made when absent), or the global one (with a
// store, the fleet's: PREFIX/guard).
func (d *Daemon) guardOf(c *config.Config, vip string) (*config.Guard, string, error) {
	if vip == "" {
		if c.Guard == nil {
			c.Guard = &config.Guard{}
		}
		return c.Guard, "global guard", nil
	}
	v, err := findVIP(c, vip)
	if err != nil {
		return nil, "", err
	}
	if v.Guard == nil {
		v.Guard = &config.Guard{}
	}
	return v.Guard, "guard of vip " + v.Name, nil
}

// tidyGuards drops guard blocks left empty by a change, so the file stays as it was written.
func tidyGuards(c *config.Config) {
	if c.Guard.Empty() {
		c.Guard = nil
	}
	for i := range c.VIPs {
		if c.VIPs[i].Guard != nil && c.VIPs[i].Guard.Empty() {
			c.VIPs[i].Guard = nil
		}
	}
}

// guardList is the list a request names.
func guardList(g *config.Guard, name string) (*[]string, error) {
	switch name {
	case api.GuardAllow:
		return &g.Allow, nil
	case api.GuardDeny:
		return &g.Deny, nil
	}
	return nil, &api.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("unknown list %q: use allow or deny", name)}
}

// GuardAdd adds a prefix to an allow or deny list (validated as the file is: a prefix that
// overlaps one of the list is refused and the running rules stay).
func (d *Daemon) GuardAdd(r api.GuardRuleReq) (api.ChangeResult, error) {
	return d.change(func(c *config.Config) (string, error) {
		g, what, err := d.guardOf(c, r.VIP)
		if err != nil {
			return "", err
		}
		l, err := guardList(g, r.List)
		if err != nil {
			return "", err
		}
		*l = append(slices.Clone(*l), r.Prefix)
		return fmt.Sprintf("%s: %s %s added", what, r.List, r.Prefix), nil
	})
}

// GuardRemove removes a prefix from an allow or deny list.
func (d *Daemon) GuardRemove(r api.GuardRuleReq) (api.ChangeResult, error) {
	return d.change(func(c *config.Config) (string, error) {
		g, what, err := d.guardOf(c, r.VIP)
		if err != nil {
			return "", err
		}
		l, err := guardList(g, r.List)
		if err != nil {
			return "", err
		}
		i := slices.Index(*l, r.Prefix)
		if i < 0 {
			return "", api.NotFound(fmt.Errorf("%s has no %s prefix %s: see `switchyard guard list` (write it as listed)", what, r.List, r.Prefix))
		}
		*l = slices.Delete(slices.Clone(*l), i, i+1)
		tidyGuards(c)
		return fmt.Sprintf("%s: %s %s removed", what, r.List, r.Prefix), nil
	})
}

// GuardLimit sets or clears the per-source and per-VIP limits.
func (d *Daemon) GuardLimit(r api.GuardLimitReq) (api.ChangeResult, error) {
	return d.change(func(c *config.Config) (string, error) {
		g, what, err := d.guardOf(c, r.VIP)
		if err != nil {
			return "", err
		}
		if len(r.Set) == 0 {
			return "", &api.Error{Status: http.StatusBadRequest, Msg: "no limit named: give per_source or per_vip"}
		}
		for _, k := range r.Set {
			switch k {
			case "per_source":
				g.PerSource = r.PerSource
			case "per_vip":
				g.PerVIP = r.PerVIP
			default:
				return "", &api.Error{Status: http.StatusBadRequest, Msg: fmt.Sprintf("unknown limit %q: use per_source or per_vip", k)}
			}
		}
		tidyGuards(c)
		return fmt.Sprintf("%s: limits %v set", what, r.Set), nil
	})
}
