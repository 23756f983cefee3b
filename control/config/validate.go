package config

import (
	"fmt"
	"math/big"
	"net/netip"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/internal/maglev"
)

// locator finds the line of a field path in the parsed document.
type locator struct{ root *yaml.Node }

// line returns the line of the node at path (map keys and sequence indexes), or of the deepest
// existing parent when the field is missing, or 0.
func (l locator) line(path ...any) int {
	line, _ := l.walk(path)
	return line
}

// present reports whether the file writes the field at path: `weight: 0` and a weight left out
// decode alike, and only the first is refused.
func (l locator) present(path ...any) bool {
	_, found := l.walk(path)
	return found
}

// walk follows path from the document's root: the line of the deepest node reached (0 without a
// document), and whether the whole path was there.
func (l locator) walk(path []any) (line int, found bool) {
	n := l.root
	if n == nil {
		return 0, false
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line = n.Line
	for _, p := range path {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == p {
						next = n.Content[i+1]
						break
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
			}
		}
		if next == nil {
			return line, false
		}
		n = next
		line = n.Line
	}
	return line, true
}

// fieldPath renders a path as vips[0].backends[1].address.
func fieldPath(path ...any) string {
	var b strings.Builder
	for _, p := range path {
		switch p := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
		case int:
			b.WriteString("[" + itoa(p) + "]")
		}
	}
	return b.String()
}

func (l locator) errf(path []any, format string, args ...any) error {
	return &FieldError{Line: l.line(path...), Field: fieldPath(path...), Msg: fmt.Sprintf(format, args...)}
}

// Validate checks a configuration built in memory (by the API), without file positions.
func (c *Config) Validate() error { return c.validate(nil) }

func (c *Config) validate(root *yaml.Node) error { return c.validateVIPs(root, nil, 0) }

// validateVIPs is validate; known, when given, names VIPs whose own fields need no check (the
// cross-VIP checks still see every VIP), and prevAddrs bounds the distinct backend addresses of
// the configuration they are equal to (0: unknown).
func (c *Config) validateVIPs(root *yaml.Node, known func(int, *VIP) bool, prevAddrs int) error {
	l := locator{root}
	if err := c.validateFields(l); err != nil {
		return err
	}
	if err := c.validateVIPList(l, known, prevAddrs); err != nil {
		return err
	}
	return c.validateGuard(l)
}

// validateFields checks the top-level fields: interface, mode, addresses, sizes, policies, BGP.
func (c *Config) validateFields(l locator) error {
	at := func(p ...any) []any { return p }
	if c.Interface == "" {
		return l.errf(at("interface"), "missing: name the interface the balancer runs on, e.g. `interface: eth0` (or --iface)")
	}
	switch c.XDPMode {
	case "", "native", "generic":
	default:
		return l.errf(at("xdp_mode"), "unknown mode %q: use native or generic", c.XDPMode)
	}
	if c.NextHop != "" {
		a, err := netip.ParseAddr(c.NextHop)
		if err != nil {
			return l.errf(at("next_hop"), "invalid address %q: give the router's IP address", c.NextHop)
		}
		c.nextHop.set(c.NextHop, a)
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535) {
		return l.errf(at("mtu"), "%d out of range: use 576..65535, or leave it out for the interface MTU", c.MTU)
	}
	if c.EncapSource4 != "" {
		if a, err := netip.ParseAddr(c.EncapSource4); err != nil || !a.Unmap().Is4() {
			return l.errf(at("encap_source4"), "invalid IPv4 address %q", c.EncapSource4)
		} else {
			c.encap4.set(c.EncapSource4, a)
		}
	}
	if c.EncapSource6 != "" {
		if a, err := netip.ParseAddr(c.EncapSource6); err != nil || !a.Is6() || a.Is4In6() {
			return l.errf(at("encap_source6"), "invalid IPv6 address %q", c.EncapSource6)
		} else {
			c.encap6.set(c.EncapSource6, a)
		}
	}
	if c.RingSize != 0 && (c.RingSize < 3 || c.RingSize >= 1<<24 || !big.NewInt(int64(c.RingSize)).ProbablyPrime(20)) {
		return l.errf(at("ring_size"), "%d is not a prime between 3 and 16777216: use a prime such as 65537", c.RingSize)
	}
	if err := c.validateRingFields(l); err != nil {
		return err
	}
	if c.MaxBackends == 1 {
		return l.errf(at("max_backends"), "1 leaves no room (id 0 is reserved): use at least 2")
	}
	if err := c.validateSizes(l); err != nil {
		return err
	}
	switch c.AllBackendsDown {
	case "", AllDownKeep, AllDownDrop:
	default:
		return l.errf(at("all_backends_down"), "unknown policy %q: use keep or drop", c.AllBackendsDown)
	}
	if err := validHealthMode(c.HealthMode); err != nil {
		return l.errf(at("health_mode"), "%v", err)
	}
	if c.BGP != nil {
		if err := c.BGP.validate(l); err != nil {
			return err
		}
	}
	return nil
}

// validateVIPList checks every VIP (but those known names, see validateVIPs) and what spans
// VIPs: their number, distinct names and keys, and the distinct backend addresses the maps hold.
func (c *Config) validateVIPList(l locator, known func(int, *VIP) bool, prevAddrs int) error {
	at := func(p ...any) []any { return p }
	maxVIPs := c.MaxVIPs
	if maxVIPs == 0 {
		maxVIPs = DefaultMaxVIPs
	}
	if uint32(len(c.VIPs)) > maxVIPs {
		return l.errf(at("vips"), "%d VIPs, more than max_vips %d: raise max_vips (restart with `lb detach` first, as the maps change size)", len(c.VIPs), maxVIPs)
	}
	nb, fresh := 0, 0 // backends listed, and listed by VIPs checked one by one
	for i := range c.VIPs {
		nb += len(c.VIPs[i].Backends)
	}
	names := make(map[string]int, len(c.VIPs))
	keys := make(map[vipKey]int, len(c.VIPs))
	prefixes := make(map[netip.Addr]int, len(c.VIPs)) // first VIP of each address
	addrs := map[netip.Addr]bool{}
	for i := range c.VIPs {
		v := &c.VIPs[i]
		if known == nil || !known(i, v) {
			if err := v.validate(l, i); err != nil {
				return err
			}
			fresh += len(v.Backends)
		}
		if j, dup := names[v.Name]; dup {
			return l.errf(at("vips", i, "name"), "name %q already used by vips[%d]: give each VIP its own name", v.Name, j)
		}
		names[v.Name] = i
		if j, dup := keys[v.key()]; dup {
			return l.errf(at("vips", i, "address"), "%s already defined by vips[%d]: merge the two", v.key(), j)
		}
		keys[v.key()] = i
		if j, ok := prefixes[v.Addr()]; ok && !v.BGP.Equal(c.VIPs[j].BGP) {
			return l.errf(at("vips", i, "bgp"), "differs from vips[%d] (%s) on the same address %s: VIPs on one address share one announced prefix, so give them the same bgp section", j, c.VIPs[j].Name, v.Addr())
		}
		if _, ok := prefixes[v.Addr()]; !ok {
			prefixes[v.Addr()] = i
		}
	}
	if err := c.validateServerIDs(l); err != nil {
		return err
	}
	maxB := c.MaxBackends
	if maxB == 0 {
		maxB = DefaultMaxBackends
	}
	c.addrs = 0
	if uint32(nb) < maxB {
		c.addrs = nb
		return nil // fewer backends listed than slots: the distinct ones fit
	}
	if known != nil && prevAddrs > 0 && uint32(prevAddrs+fresh) < maxB {
		// A change: the VIPs equal to the previous configuration's list no address it did not.
		c.addrs = prevAddrs + fresh
		return nil
	}
	// Distinct spellings first (no parse): an address written two ways only counts twice here.
	spelled := make(map[string]struct{}, nb/2)
	for i := range c.VIPs {
		for _, b := range c.VIPs[i].Backends {
			spelled[b.Address] = struct{}{}
		}
	}
	if uint32(len(spelled)) < maxB {
		c.addrs = len(spelled)
		return nil
	}
	for i := range c.VIPs {
		for j := range c.VIPs[i].Backends {
			addrs[c.VIPs[i].Backends[j].Addr()] = true
		}
	}
	if uint32(len(addrs)) >= maxB {
		return l.errf(at("vips"), "%d distinct backend addresses, the maps hold %d: raise max_backends", len(addrs), maxB-1)
	}
	c.addrs = len(addrs)
	return nil
}

func (v *VIP) validate(l locator, i int) error {
	at := func(p ...any) []any { return append([]any{"vips", i}, p...) }
	a, err := netip.ParseAddr(v.Address)
	if err != nil || a.Zone() != "" {
		return l.errf(at("address"), "invalid address %q: give an IPv4 or IPv6 address such as 198.18.100.1", v.Address)
	}
	if a.IsUnspecified() || a.IsMulticast() {
		return l.errf(at("address"), "%s cannot be a VIP: use a unicast address", a)
	}
	v.addr.set(v.Address, a)
	if v.Protocol != "" && protocol(v.Protocol) == "" {
		return l.errf(at("protocol"), "unknown protocol %q: use tcp or udp", v.Protocol)
	}
	if err := checkHash(v.Hash); err != nil {
		return l.errf(at("hash"), "%v", err)
	}
	if v.Name != "" && strings.ContainsAny(v.Name, " \t\n") {
		return l.errf(at("name"), "%q contains white space: use letters, digits, - or _", v.Name)
	}
	if h := v.Health; h != nil {
		switch h.Type {
		case "tcp", "http":
		case "":
			return l.errf(at("health", "type"), "missing: use tcp or http")
		default:
			return l.errf(at("health", "type"), "unknown check %q: use tcp or http", h.Type)
		}
		if err := validHealthMode(h.Mode); err != nil {
			return l.errf(at("health", "mode"), "%v", err)
		}
		if h.Port == 0 && v.Port == 0 {
			return l.errf(at("health", "port"), "missing: the VIP balances every port, so name the port to probe")
		}
		if h.Type == "tcp" && (h.Path != "" || h.ExpectStatus != 0) {
			return l.errf(at("health", "path"), "path and expect_status apply to http checks only: use type: http or remove them")
		}
		if h.Path != "" && !strings.HasPrefix(h.Path, "/") {
			return l.errf(at("health", "path"), "%q must start with /", h.Path)
		}
		if h.ExpectStatus != 0 && (h.ExpectStatus < 100 || h.ExpectStatus > 599) {
			return l.errf(at("health", "expect_status"), "%d is not an HTTP status: use 100..599", h.ExpectStatus)
		}
		if h.Rise < 0 || h.Fall < 0 {
			return l.errf(at("health", "rise"), "rise and fall must be positive counts")
		}
		if h.Interval != 0 && h.Timeout > h.Interval {
			return l.errf(at("health", "timeout"), "%s is longer than the interval %s: make it shorter", h.Timeout.D(), h.Interval.D())
		}
	}
	seen := make(map[netip.Addr]int, len(v.Backends))
	for j := range v.Backends {
		b := &v.Backends[j]
		ba, err := netip.ParseAddr(b.Address)
		if err != nil || ba.Zone() != "" {
			return l.errf(at("backends", j, "address"), "invalid address %q: give the backend's IPv4 or IPv6 tunnel address", b.Address)
		}
		if ba.IsUnspecified() || ba.IsMulticast() {
			return l.errf(at("backends", j, "address"), "%s cannot be a backend: use a unicast address", ba)
		}
		if k, dup := seen[ba.Unmap()]; dup {
			return l.errf(at("backends", j, "address"), "%s already listed as backends[%d]: list each backend once and use weight", ba, k)
		}
		seen[ba.Unmap()] = j
		b.addr.set(b.Address, ba)
		if b.Weight == 0 && l.present(at("backends", j, "weight")...) {
			return l.errf(at("backends", j, "weight"), "0 is not a weight: use 1..65536 (left out means 1); to take the backend out of new flows write `drained: true` or run `switchyard backend drain %s %s`", v.Name, b.Address)
		}
		if b.Weight > 1<<16 {
			return l.errf(at("backends", j, "weight"), "%d too large: use 1..65536 (left out means 1; drain to take it out)", b.Weight)
		}
	}
	if err := v.validateQUIC(l, i); err != nil {
		return err
	}
	if v.BGP != nil {
		if err := v.BGP.validate(l, at("bgp")); err != nil {
			return err
		}
	}
	if v.RingSize != 0 {
		if err := maglev.ValidateSize(uint64(v.RingSize)); err != nil {
			return l.errf(at("ring_size"), "%v (or leave it out to size the ring from the backends)", err)
		}
	}
	v.ApplyDefaults()
	return nil
}
