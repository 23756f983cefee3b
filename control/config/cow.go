package config

// CloneForChange is a copy of c for a change to be made on (the daemon's CLI changes): the
// top-level fields and the VIP list are copied, but every VIP's backends and health check are
// shared with c until MutableVIP gives the VIP a copy of its own. A change of one VIP at 4,096
// VIPs then copies one VIP, not 65,536 backends, and Equal finds the untouched VIPs equal without
// comparing their backends (the same memory). Whatever changes a VIP of the copy must go through
// MutableVIP (or replace the VIP whole); c itself must not change afterwards.
func (c *Config) CloneForChange() *Config {
	n := *c
	n.ICMPTooBig, n.SecondChance = clonePtr(c.ICMPTooBig), clonePtr(c.SecondChance)
	n.VIPs = append(make([]VIP, 0, len(c.VIPs)+1), c.VIPs...)
	n.BGP = c.BGP.clone()
	n.Guard = c.Guard.Clone()
	return &n
}

// MutableVIP gives VIP i a copy of its backends and health check (see CloneForChange) and
// returns it, ready to be changed in place.
func (c *Config) MutableVIP(i int) *VIP {
	c.VIPs[i] = c.VIPs[i].clone()
	return &c.VIPs[i]
}

// sameBackends reports whether two backend lists are the same memory (one shared by
// CloneForChange), which makes them equal without a comparison.
func sameBackends(a, b []Backend) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
