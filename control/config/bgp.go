package config

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// BGP announces the VIPs to routers (docs/fleet.md). Leaving the section out keeps a node that
// announces nothing: the routers need static routes to it.
type BGP struct {
	// ASN is this node's autonomous system number.
	ASN uint32 `yaml:"asn"`
	// RouterID is the node's BGP identifier, an IPv4 address (default: the interface's IPv4).
	RouterID string `yaml:"router_id,omitempty"`
	// Peers are the routers the node dials; it never listens on port 179.
	Peers []BGPPeer `yaml:"peers"`
	// RoutePolicy (communities, large_communities, local_pref, med) applies to every VIP this
	// node announces; a VIP's own bgp section adds to it (routepolicy.go).
	RoutePolicy `yaml:",inline"`
	// Node is this node's name in the fleet, which VIPs' announce_from and overrides name
	// (default: the host name).
	Node string `yaml:"node,omitempty"`
	// Labels are names shared by several nodes (a site, a role) that announce_from and
	// overrides can use instead of node names.
	Labels []string `yaml:"labels,omitempty"`
	// DeprefMED is the MED `lb drain-node --depref` announces before withdrawing (default
	// 4294967294: higher than any other path's, below the 2^32-1 some routers take as infinite).
	DeprefMED uint32 `yaml:"depref_med,omitempty"`
	// NextHop is the IPv4 next hop announced with IPv4 VIPs (default: the interface's IPv4).
	NextHop string `yaml:"next_hop,omitempty"`
	// NextHop6 is the IPv6 next hop announced with IPv6 VIPs (default: the interface's IPv6).
	NextHop6 string `yaml:"next_hop6,omitempty"`
	// DrainGrace is how long `lb drain-node` and SIGTERM keep forwarding the established flows
	// after withdrawing the VIPs, before the program is detached (default 30s).
	DrainGrace Duration `yaml:"drain_grace,omitempty"`
	// GracefulRestart announces the graceful restart capability (RFC 4724, RFC 8538's
	// notification flag): a router that helps keeps this node's routes while `lb run` restarts.
	GracefulRestart *GracefulRestart `yaml:"graceful_restart,omitempty"`
}

// GracefulRestart is the bgp section's graceful restart (on by default).
type GracefulRestart struct {
	// Enabled announces the capability (default true).
	Enabled *bool `yaml:"enabled,omitempty"`
	// RestartTime is how long a router keeps the routes of a node whose daemon died (its program
	// keeps forwarding) waiting for it to come back (default 120s; whole seconds, 1s to 4095s).
	RestartTime Duration `yaml:"restart_time,omitempty"`
}

// BFD is a peer's BFD session (RFC 5880, single hop RFC 5881): the router and the node send a
// control packet every min_tx; each side declares the other down after multiplier x min_rx
// without one, and BGP goes down with it.
type BFD struct {
	// MinRx is the slowest rate this node accepts packets at (default 300ms).
	MinRx Duration `yaml:"min_rx,omitempty"`
	// MinTx is how often this node sends (default 300ms).
	MinTx Duration `yaml:"min_tx,omitempty"`
	// Multiplier is the number of missed packets that declares the peer down (default 3).
	Multiplier int `yaml:"multiplier,omitempty"`
}

// BGPPeer is one router.
type BGPPeer struct {
	// Address is the router's address on the link (IPv4 or IPv6).
	Address string `yaml:"address"`
	// ASN is the router's autonomous system number (the node's own for iBGP).
	ASN uint32 `yaml:"asn"`
	// Port is the router's BGP port (default 179).
	Port uint16 `yaml:"port,omitempty"`
	// HoldTime is the BGP hold time offered (default 90s; 0 after defaults is impossible; at
	// least 3s). The router withdraws a silent node's routes after it.
	HoldTime Duration `yaml:"hold_time,omitempty"`
	// Password enables TCP MD5 signatures (RFC 2385) on the session.
	Password string `yaml:"password,omitempty"`
	// BFD runs a BFD session with the router (off when left out); the router must run BFD for
	// this node too.
	BFD *BFD `yaml:"bfd,omitempty"`
}

// BGP defaults.
const (
	DefaultBGPHoldTime    = 90 * time.Second
	DefaultBGPDrainGrace  = 30 * time.Second
	DefaultBGPRestartTime = 120 * time.Second
	DefaultBFDInterval    = 300 * time.Millisecond
	DefaultBFDMultiplier  = 3
	DefaultDeprefMED      = 4294967294
)

// NodeID is this node's name and labels, which announce_from and overrides match.
func (b *BGP) NodeID() Node { return Node{Name: b.Node, Labels: b.Labels} }

// RestartTime is the graceful restart time announced (0 when graceful restart is off).
func (b *BGP) RestartTime() time.Duration {
	gr := b.GracefulRestart
	if gr != nil && gr.Enabled != nil && !*gr.Enabled {
		return 0
	}
	if gr == nil || gr.RestartTime == 0 {
		return DefaultBGPRestartTime
	}
	return gr.RestartTime.D()
}

// applyDefaults fills the section's unset fields.
func (b *BGP) applyDefaults() {
	if b.DrainGrace == 0 {
		b.DrainGrace = Duration(DefaultBGPDrainGrace)
	}
	if b.Node == "" {
		b.Node, _ = os.Hostname()
	}
	if b.DeprefMED == 0 {
		b.DeprefMED = DefaultDeprefMED
	}
	for i := range b.Peers {
		if b.Peers[i].HoldTime == 0 {
			b.Peers[i].HoldTime = Duration(DefaultBGPHoldTime)
		}
		if b.Peers[i].Port == 0 {
			b.Peers[i].Port = 179
		}
		if f := b.Peers[i].BFD; f != nil {
			f.applyDefaults()
		}
	}
}

func (f *BFD) applyDefaults() {
	if f.MinRx == 0 {
		f.MinRx = Duration(DefaultBFDInterval)
	}
	if f.MinTx == 0 {
		f.MinTx = Duration(DefaultBFDInterval)
	}
	if f.Multiplier == 0 {
		f.Multiplier = DefaultBFDMultiplier
	}
}

func (b *BGP) clone() *BGP {
	if b == nil {
		return nil
	}
	n := *b
	n.Peers = append([]BGPPeer(nil), b.Peers...)
	for i, p := range n.Peers {
		n.Peers[i].BFD = clonePtr(p.BFD)
	}
	n.GracefulRestart = clonePtr(b.GracefulRestart)
	n.RoutePolicy = b.RoutePolicy.clone()
	n.Labels = append([]string(nil), b.Labels...)
	return &n
}

// ParseCommunity reads "ASN:VALUE" (each 0..65535) or a well-known name into its 32-bit value.
func ParseCommunity(s string) (uint32, error) {
	switch strings.ToLower(s) {
	case "no-export":
		return 0xFFFFFF01, nil
	case "no-advertise":
		return 0xFFFFFF02, nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	a, err1 := strconv.ParseUint(hi, 10, 16)
	v, err2 := strconv.ParseUint(lo, 10, 16)
	if !ok || err1 != nil || err2 != nil {
		return 0, fmt.Errorf("community %q: use ASN:VALUE with both parts 0..65535 (e.g. 65001:100), no-export or no-advertise", s)
	}
	return uint32(a)<<16 | uint32(v), nil
}

func (b *BGP) validate(l locator) error {
	at := func(p ...any) []any { return append([]any{"bgp"}, p...) }
	if b.ASN == 0 {
		return l.errf(at("asn"), "missing: give this node's AS number, e.g. `asn: 65001` (a private ASN 64512..65534 or 4200000000..4294967294)")
	}
	if b.RouterID != "" {
		if a, err := netip.ParseAddr(b.RouterID); err != nil || !a.Is4() || a.IsUnspecified() {
			return l.errf(at("router_id"), "invalid router id %q: give an IPv4 address (usually the node's own), or leave it out for the interface's", b.RouterID)
		}
	}
	if b.NextHop != "" {
		if a, err := netip.ParseAddr(b.NextHop); err != nil || !a.Is4() {
			return l.errf(at("next_hop"), "invalid IPv4 next hop %q: give this node's IPv4 address on the router's link, or leave it out", b.NextHop)
		}
	}
	if b.NextHop6 != "" {
		if a, err := netip.ParseAddr(b.NextHop6); err != nil || !a.Is6() || a.Is4In6() {
			return l.errf(at("next_hop6"), "invalid IPv6 next hop %q: give this node's IPv6 address on the router's link, or leave it out", b.NextHop6)
		}
	}
	if err := b.RoutePolicy.validate(l, at()); err != nil {
		return err
	}
	if b.Node != "" && !validNodeRef(b.Node) {
		return l.errf(at("node"), "%q is not a node name: use letters, digits, '-', '_' or '.' (at most 63), or leave it out for the host name", b.Node)
	}
	for i, lb := range b.Labels {
		if !validNodeRef(lb) {
			return l.errf(at("labels", i), "%q is not a label: use letters, digits, '-', '_' or '.' (at most 63)", lb)
		}
	}
	if b.DrainGrace != 0 && b.DrainGrace.D() < 0 {
		return l.errf(at("drain_grace"), "must be positive")
	}
	if gr := b.GracefulRestart; gr != nil {
		if t := gr.RestartTime.D(); t != 0 && (t < time.Second || t > 4095*time.Second || t%time.Second != 0) {
			return l.errf(at("graceful_restart", "restart_time"), "%s out of range: the restart time is whole seconds from 1s to 4095s (a 12-bit field; e.g. 120s): how long a router keeps this node's routes while its daemon restarts", t)
		}
	}
	if len(b.Peers) == 0 {
		return l.errf(at("peers"), "no peer: list the routers to announce to, e.g. `peers: [{address: 198.18.2.1, asn: 65000}]`, or remove the bgp section")
	}
	seen := map[netip.Addr]int{}
	for i, p := range b.Peers {
		a, err := netip.ParseAddr(p.Address)
		if err != nil || a.Zone() != "" || a.IsUnspecified() || a.IsMulticast() {
			return l.errf(at("peers", i, "address"), "invalid address %q: give the router's unicast IPv4 or IPv6 address", p.Address)
		}
		if j, dup := seen[a.Unmap()]; dup {
			return l.errf(at("peers", i, "address"), "%s already listed as peers[%d]: list each router once", a, j)
		}
		seen[a.Unmap()] = i
		if p.ASN == 0 {
			return l.errf(at("peers", i, "asn"), "missing: give the router's AS number (this node's own, %d, for iBGP)", b.ASN)
		}
		if h := p.HoldTime.D(); h != 0 && (h < 3*time.Second || h > 65535*time.Second || h%time.Second != 0) {
			return l.errf(at("peers", i, "hold_time"), "%s out of range: BGP hold times are whole seconds from 3s to 65535s (e.g. 9s; keepalives go every third of it)", h)
		}
		if len(p.Password) > 80 {
			return l.errf(at("peers", i, "password"), "longer than 80 characters, the TCP MD5 key limit: use a shorter one")
		}
		if p.BFD != nil {
			if err := p.BFD.validate(l, at("peers", i, "bfd")); err != nil {
				return err
			}
		}
	}
	return nil
}

// validate checks the timers a BFD packet can carry and a router can keep up with.
func (f *BFD) validate(l locator, at []any) error {
	for _, iv := range []struct {
		name string
		d    Duration
	}{{"min_rx", f.MinRx}, {"min_tx", f.MinTx}} {
		if d := iv.d.D(); d != 0 && (d < 10*time.Millisecond || d > time.Minute || d%time.Millisecond != 0) {
			return l.errf(append(at, iv.name), "%s out of range: give whole milliseconds from 10ms to 1m (e.g. 100ms; the router detects a failure after multiplier x this)", d)
		}
	}
	if f.Multiplier < 0 || f.Multiplier > 255 {
		return l.errf(append(at, "multiplier"), "%d out of range: give 1 to 255 packets (3 is usual)", f.Multiplier)
	}
	return nil
}
