package config

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// RoutePolicy is what an announcement carries besides its next hop: communities (RFC 1997),
// large communities (RFC 8092), LOCAL_PREF (sent to iBGP peers only, RFC 4271) and MED. It sits
// in the bgp section (every VIP of the node), in a VIP's bgp (that VIP) and in a VIP's overrides
// (that VIP on some nodes). Communities add up from the outer level inward; local_pref and med
// are taken from the innermost level that sets them.
type RoutePolicy struct {
	// Communities are "ASN:VALUE" (each 0..65535) or no-export, no-advertise.
	Communities []string `yaml:"communities,omitempty"`
	// LargeCommunities are "GLOBAL:LOCAL1:LOCAL2" (each 0..4294967295).
	LargeCommunities []string `yaml:"large_communities,omitempty"`
	// LocalPref is the LOCAL_PREF sent to iBGP peers (eBGP peers never get it).
	LocalPref *uint32 `yaml:"local_pref,omitempty"`
	// MED is the MULTI_EXIT_DISC: among routes from one neighbouring AS a router prefers the
	// lowest, so a node with a higher MED leaves the multipath set.
	MED *uint32 `yaml:"med,omitempty"`
}

// VIPBGP is a VIP's own route policy and the nodes that announce it (stored with the VIP).
type VIPBGP struct {
	RoutePolicy `yaml:",inline"`
	// AnnounceFrom lists node names or labels (bgp.node, bgp.labels); only nodes matching one
	// announce the VIP. Empty: every node.
	AnnounceFrom []string `yaml:"announce_from,omitempty"`
	// Overrides change the policy on the nodes they match, applied in order (a later one's
	// local_pref and med win).
	Overrides []NodeOverride `yaml:"overrides,omitempty"`
}

// NodeOverride is a VIP's route policy on the nodes named (or labelled) Node.
type NodeOverride struct {
	// Node is a node name or a label.
	Node        string `yaml:"node"`
	RoutePolicy `yaml:",inline"`
}

// Node identifies a node for announce_from and overrides: its name and its labels.
type Node struct {
	Name   string
	Labels []string
}

// Matches says whether ref names the node or one of its labels.
func (n Node) Matches(ref string) bool { return ref == n.Name || slices.Contains(n.Labels, ref) }

// matchesAny is true when refs is empty (every node) or one of them matches.
func (n Node) matchesAny(refs []string) bool {
	if len(refs) == 0 {
		return true
	}
	return slices.ContainsFunc(refs, n.Matches)
}

// Announces says whether the node announces the VIP (announce_from).
func (v *VIP) Announces(n Node) bool { return v.BGP == nil || n.matchesAny(v.BGP.AnnounceFrom) }

// Policy is the route policy the node announces the VIP with: the node's bgp section, then the
// VIP's, then the VIP's overrides that match the node, in order.
func (v *VIP) Policy(global *BGP, n Node) RoutePolicy {
	var p RoutePolicy
	if global != nil {
		p = p.merge(global.RoutePolicy)
	}
	if b := v.BGP; b != nil {
		p = p.merge(b.RoutePolicy)
		for _, o := range b.Overrides {
			if n.Matches(o.Node) {
				p = p.merge(o.RoutePolicy)
			}
		}
	}
	return p
}

// merge returns p with o on top: communities added (once each), local_pref and med replaced
// when o sets them.
func (p RoutePolicy) merge(o RoutePolicy) RoutePolicy {
	return RoutePolicy{LocalPref: cmp.Or(o.LocalPref, p.LocalPref), MED: cmp.Or(o.MED, p.MED),
		Communities: appendNew(slices.Clone(p.Communities), o.Communities), LargeCommunities: appendNew(slices.Clone(p.LargeCommunities), o.LargeCommunities)}
}

func appendNew(to, from []string) []string {
	for _, s := range from {
		if !slices.Contains(to, s) {
			to = append(to, s)
		}
	}
	return to
}

// Equal reports whether two policies are the same configuration.
func (p RoutePolicy) Equal(o RoutePolicy) bool {
	return slices.Equal(p.Communities, o.Communities) && slices.Equal(p.LargeCommunities, o.LargeCommunities) &&
		eqPtr(p.LocalPref, o.LocalPref) && eqPtr(p.MED, o.MED)
}

// Equal reports whether two VIP bgp sections are the same configuration (nil equals nil only).
func (b *VIPBGP) Equal(o *VIPBGP) bool {
	if b == nil || o == nil {
		return b == o
	}
	return b.RoutePolicy.Equal(o.RoutePolicy) && slices.Equal(b.AnnounceFrom, o.AnnounceFrom) &&
		slices.EqualFunc(b.Overrides, o.Overrides, func(x, y NodeOverride) bool { return x.Node == y.Node && x.RoutePolicy.Equal(y.RoutePolicy) })
}

func (p RoutePolicy) clone() RoutePolicy {
	p.Communities = slices.Clone(p.Communities)
	p.LargeCommunities = slices.Clone(p.LargeCommunities)
	p.LocalPref, p.MED = clonePtr(p.LocalPref), clonePtr(p.MED)
	return p
}

// Clone is a deep copy (nil stays nil).
func (b *VIPBGP) Clone() *VIPBGP {
	if b == nil {
		return nil
	}
	n := &VIPBGP{RoutePolicy: b.RoutePolicy.clone(), AnnounceFrom: slices.Clone(b.AnnounceFrom)}
	for _, o := range b.Overrides {
		n.Overrides = append(n.Overrides, NodeOverride{Node: o.Node, RoutePolicy: o.RoutePolicy.clone()})
	}
	return n
}

// LargeCommunity is an RFC 8092 large community.
type LargeCommunity struct{ Global, Local1, Local2 uint32 }

// ParseLargeCommunity reads "GLOBAL:LOCAL1:LOCAL2", each 0..4294967295.
func ParseLargeCommunity(s string) (LargeCommunity, error) {
	f := strings.Split(s, ":")
	var v [3]uint64
	ok := len(f) == 3
	for i := 0; ok && i < 3; i++ {
		var err error
		v[i], err = strconv.ParseUint(f[i], 10, 32)
		ok = err == nil
	}
	if !ok {
		return LargeCommunity{}, fmt.Errorf("large community %q: use GLOBAL:LOCAL1:LOCAL2 with each part 0..4294967295 (e.g. 65001:1:100)", s)
	}
	return LargeCommunity{uint32(v[0]), uint32(v[1]), uint32(v[2])}, nil
}

// validate checks the communities' syntax; at is the policy's path in the file.
func (p RoutePolicy) validate(l locator, at []any) error {
	for i, c := range p.Communities {
		if _, err := ParseCommunity(c); err != nil {
			return l.errf(append(at, "communities", i), "%v", err)
		}
	}
	for i, c := range p.LargeCommunities {
		if _, err := ParseLargeCommunity(c); err != nil {
			return l.errf(append(at, "large_communities", i), "%v", err)
		}
	}
	return nil
}

// validNodeRef is a node name or label: letters, digits, '-', '_' and '.'.
func validNodeRef(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// validate checks a VIP's bgp section: the policies' syntax and the node references' spelling
// (whether they name a node of the fleet is CheckNodes').
func (b *VIPBGP) validate(l locator, at []any) error {
	if err := b.RoutePolicy.validate(l, at); err != nil {
		return err
	}
	for i, r := range b.AnnounceFrom {
		if !validNodeRef(r) {
			return l.errf(append(at, "announce_from", i), "%q is not a node name or label: use letters, digits, '-', '_' or '.' (at most 63)", r)
		}
		if slices.Index(b.AnnounceFrom, r) != i {
			return l.errf(append(at, "announce_from", i), "%q listed twice: list each node or label once", r)
		}
	}
	for i, o := range b.Overrides {
		if !validNodeRef(o.Node) {
			return l.errf(append(at, "overrides", i, "node"), "%q is not a node name or label: name the node (bgp.node) or a label (bgp.labels) the override applies to", o.Node)
		}
		if err := o.RoutePolicy.validate(l, append(at, "overrides", i)); err != nil {
			return err
		}
	}
	return nil
}

// NodeRefs lists every node name or label the VIPs' bgp sections refer to (announce_from and
// overrides), with the first VIP that does, for CheckNodes.
func (c *Config) NodeRefs() map[string]string {
	out := map[string]string{}
	for i := range c.VIPs {
		b := c.VIPs[i].BGP
		if b == nil {
			continue
		}
		for _, r := range b.AnnounceFrom {
			if _, ok := out[r]; !ok {
				out[r] = c.VIPs[i].Name
			}
		}
		for _, o := range b.Overrides {
			if _, ok := out[o.Node]; !ok {
				out[o.Node] = c.VIPs[i].Name
			}
		}
	}
	return out
}

// CheckNodes refuses a VIP whose announce_from or overrides name no node of nodes (by name or
// label): a typo there would silently withdraw the VIP from every node, or change nothing.
// References prev already holds (nil: none) are not checked again, so that a node that left the
// fleet blocks no unrelated change.
func (c *Config) CheckNodes(nodes []Node, prev *Config) error {
	refs := c.NodeRefs()
	var old map[string]string
	if prev != nil {
		old = prev.NodeRefs()
	}
	names := make([]string, 0, len(refs))
	for r := range refs {
		if _, ok := old[r]; !ok {
			names = append(names, r)
		}
	}
	slices.Sort(names)
	for _, r := range names {
		if !slices.ContainsFunc(nodes, func(n Node) bool { return n.Matches(r) }) {
			return fmt.Errorf("vip %s: bgp names node or label %q, which no node of the fleet has (known: %s): fix the name, or start that node first (each node registers its bgp.node and bgp.labels in the store when it starts)",
				refs[r], r, describeNodes(nodes))
		}
	}
	return nil
}

func describeNodes(nodes []Node) string {
	if len(nodes) == 0 {
		return "none"
	}
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = n.Name
		if len(n.Labels) > 0 {
			parts[i] += " [" + strings.Join(n.Labels, " ") + "]"
		}
	}
	return strings.Join(parts, ", ")
}
