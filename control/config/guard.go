package config

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/switchyard/switchyard/internal/layout"
)

// Guard is the DDoS guard (docs/xdp.md, "The guard"), at the top of the file for every VIP and
// on a VIP for that VIP. It applies to flows without a connection-table entry only: an
// established flow is never limited nor denied. A source in allow skips every rule; a source in
// deny is dropped; per_source and per_vip are token buckets of new connections (TCP SYNs, UDP
// datagrams without an entry). A VIP's allow and deny add to the global lists; its per_source and
// per_vip replace the global ones.
type Guard struct {
	// Allow lists prefixes exempt from the guard (an allow inside a deny wins).
	Allow []string `yaml:"allow,omitempty"`
	// Deny lists prefixes whose new flows are dropped.
	Deny []string `yaml:"deny,omitempty"`
	// PerSource limits new connections per source prefix.
	PerSource *SourceLimit `yaml:"per_source,omitempty"`
	// PerVIP limits new connections to the VIP, all sources together.
	PerVIP *Limit `yaml:"per_vip,omitempty"`
}

// Limit is a token bucket: rate new connections a second, burst at once (default rate).
type Limit struct {
	Rate  uint64 `yaml:"rate"`
	Burst uint64 `yaml:"burst,omitempty"`
}

// SourceLimit is a Limit per source prefix: every address of one /prefix_v4 (IPv4) or
// /prefix_v6 (IPv6) shares a bucket.
type SourceLimit struct {
	Limit    `yaml:",inline"`
	PrefixV4 int `yaml:"prefix_v4,omitempty"`
	PrefixV6 int `yaml:"prefix_v6,omitempty"`
}

// Defaults of a source bucket's prefix lengths: one IPv4 address, one IPv6 /64 (a host's usual
// allocation, which one host can walk freely).
const (
	DefaultGuardPrefixV4 = 32
	DefaultGuardPrefixV6 = 64
	// MaxGuardRate bounds a rate: the program keeps a token as 1e9/rate ns.
	MaxGuardRate = 1_000_000_000
)

// Clone is a deep copy (nil stays nil).
func (g *Guard) Clone() *Guard {
	if g == nil {
		return nil
	}
	n := *g
	n.Allow = slices.Clone(g.Allow)
	n.Deny = slices.Clone(g.Deny)
	n.PerSource, n.PerVIP = clonePtr(g.PerSource), clonePtr(g.PerVIP)
	return &n
}

// Equal reports whether two guards are the same configuration.
func (g *Guard) Equal(o *Guard) bool {
	if g == nil || o == nil {
		return g == o
	}
	return slices.Equal(g.Allow, o.Allow) && slices.Equal(g.Deny, o.Deny) && eqPtr(g.PerSource, o.PerSource) && eqPtr(g.PerVIP, o.PerVIP)
}

// Empty reports whether the guard holds no rule.
func (g *Guard) Empty() bool {
	return g == nil || (len(g.Allow) == 0 && len(g.Deny) == 0 && g.PerSource == nil && g.PerVIP == nil)
}

// Prefixes parses a list of guard prefixes (valid, as validation left them).
func Prefixes(list []string) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// validate checks a guard block at path: prefixes written masked, no two of a list overlapping,
// rates and prefix lengths in range.
func (g *Guard) validate(l locator, path ...any) error {
	if g == nil {
		return nil
	}
	at := func(p ...any) []any { return append(slices.Clone(path), p...) }
	for _, list := range []struct {
		name  string
		items []string
	}{{"allow", g.Allow}, {"deny", g.Deny}} {
		if err := checkPrefixList(list.items); err != nil {
			return l.errf(at(list.name, err.index), "%s", err.msg)
		}
	}
	if s := g.PerSource; s != nil {
		if err := s.Limit.check(); err != "" {
			return l.errf(at("per_source", "rate"), "%s, or remove per_source", err)
		}
		if s.PrefixV4 < 0 || s.PrefixV4 > 32 {
			return l.errf(at("per_source", "prefix_v4"), "%d out of range: use 1..32 (32, the default, is one address; 24 a /24)", s.PrefixV4)
		}
		if s.PrefixV6 < 0 || s.PrefixV6 > 128 {
			return l.errf(at("per_source", "prefix_v6"), "%d out of range: use 1..128 (64, the default, is one /64; 48 a site)", s.PrefixV6)
		}
	}
	if v := g.PerVIP; v != nil {
		if err := v.check(); err != "" {
			return l.errf(at("per_vip", "rate"), "%s, or remove per_vip", err)
		}
	}
	return nil
}

// withDefaultBurst is lim with its burst, when not set, its rate.
func (lim Limit) withDefaultBurst() Limit {
	lim.Burst = cmp.Or(lim.Burst, lim.Rate)
	return lim
}

// check says what is wrong with a limit, or "".
func (lim Limit) check() string {
	switch {
	case lim.Rate == 0:
		return "rate 0 is not a limit (it would drop every new connection): give new connections a second, at least 1; to drop a source use deny"
	case lim.Rate > MaxGuardRate:
		return fmt.Sprintf("rate %d above %d a second", lim.Rate, MaxGuardRate)
	case lim.Burst > MaxGuardRate:
		return fmt.Sprintf("burst %d above %d", lim.Burst, MaxGuardRate)
	}
	return ""
}

type prefixError struct {
	index int
	msg   string
}

// checkPrefixList refuses a prefix that does not parse, carries host bits or a zone, and two
// prefixes of one list that overlap (one holds the other: the narrower rule says nothing).
func checkPrefixList(items []string) *prefixError {
	seen := make([]netip.Prefix, 0, len(items))
	for i, s := range items {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			if a, aerr := netip.ParseAddr(s); aerr == nil {
				return &prefixError{i, fmt.Sprintf("%q is an address, not a prefix: write %s/%d", s, a.Unmap(), a.Unmap().BitLen())}
			}
			return &prefixError{i, fmt.Sprintf("invalid prefix %q: write it as 203.0.113.0/24 or 2001:db8::/32", s)}
		}
		if p.Addr().Is4In6() {
			return &prefixError{i, fmt.Sprintf("%s is IPv4-mapped: write the IPv4 prefix", p)}
		}
		if p.Masked() != p {
			return &prefixError{i, fmt.Sprintf("%s has host bits set: give %s", p, p.Masked())}
		}
		for j, q := range seen {
			if p.Overlaps(q) {
				return &prefixError{i, fmt.Sprintf("%s overlaps %s (entry %d of the same list): keep the wider one, or move the narrower one to the other list", p, q, j)}
			}
		}
		seen = append(seen, p)
	}
	return nil
}

// Validate checks a global guard on its own (as the fleet store holds it): its prefixes, limits,
// and that its lists fit the maps. The rules it adds up to with the VIPs' are checked with the
// whole configuration (Config.Validate).
func (g *Guard) Validate() error {
	if err := g.validate(locator{}, "guard"); err != nil {
		return err
	}
	if g != nil && (len(g.Allow) > layout.GuardRulesMax || len(g.Deny) > layout.GuardRulesMax) {
		return tooManyRules(locator{}, len(g.Allow), len(g.Deny))
	}
	return nil
}

func tooManyRules(l locator, allow, deny int) error {
	return l.errf([]any{"guard"}, "%d allow and %d deny prefixes in all, the maps hold %d of each: merge prefixes into wider ones, or move per-VIP rules that every VIP shares to the global guard", allow, deny, layout.GuardRulesMax)
}

// validateGuard checks the global guard and each VIP's, and that the rules fit the maps.
func (c *Config) validateGuard(l locator) error {
	if err := c.Guard.validate(l, "guard"); err != nil {
		return err
	}
	allow, deny := 0, 0
	if c.Guard != nil {
		allow, deny = len(c.Guard.Allow), len(c.Guard.Deny)
	}
	for i := range c.VIPs {
		g := c.VIPs[i].Guard
		if err := g.validate(l, "vips", i, "guard"); err != nil {
			return err
		}
		if g != nil {
			allow, deny = allow+len(g.Allow), deny+len(g.Deny)
		}
	}
	if allow > layout.GuardRulesMax || deny > layout.GuardRulesMax {
		return tooManyRules(l, allow, deny)
	}
	return nil
}

// EffectiveGuard is a VIP's guard with the global one merged in: the global lists and the VIP's
// side by side, the VIP's limits else the global ones, prefix lengths defaulted. Off (nil) when
// neither has a rule.
type EffectiveGuard struct {
	GlobalAllow, GlobalDeny bool // the global lists apply
	Allow, Deny             []netip.Prefix
	PerSource               *SourceLimit
	PerVIP                  *Limit
}

// GuardOf is the guard that applies to VIP v (nil: off).
func (c *Config) GuardOf(v *VIP) *EffectiveGuard {
	if c.Guard.Empty() && v.Guard.Empty() {
		return nil
	}
	e := &EffectiveGuard{}
	if g := c.Guard; g != nil {
		e.GlobalAllow, e.GlobalDeny = len(g.Allow) > 0, len(g.Deny) > 0
		e.PerSource, e.PerVIP = g.PerSource, g.PerVIP
	}
	if g := v.Guard; g != nil {
		e.Allow, e.Deny = Prefixes(g.Allow), Prefixes(g.Deny)
		e.PerSource, e.PerVIP = cmp.Or(g.PerSource, e.PerSource), cmp.Or(g.PerVIP, e.PerVIP)
	}
	if s := e.PerSource; s != nil {
		n := *s
		n.PrefixV4 = int(orDefault(uint32(n.PrefixV4), DefaultGuardPrefixV4))
		n.PrefixV6 = int(orDefault(uint32(n.PrefixV6), DefaultGuardPrefixV6))
		n.Limit = n.withDefaultBurst()
		e.PerSource = &n
	}
	if v := e.PerVIP; v != nil {
		n := v.withDefaultBurst()
		e.PerVIP = &n
	}
	return e
}
