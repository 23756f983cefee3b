package lab

import (
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/lab/bird"
	"github.com/switchyard/switchyard/lab/topo"
)

// The lab's BGP: the router (bird2, AS RouterASN) accepts a session from every balancer (all in
// AS BalancerASN, as a fleet's nodes usually are) and merges their routes into one ECMP route.
const (
	RouterASN   = 65000
	BalancerASN = 65001
	// BGPHoldTime is short so that a balancer that goes silent is withdrawn within seconds.
	BGPHoldTime = 3 * time.Second
	// BGPDrainGrace is the balancers' bgp.drain_grace (SIGTERM and `lb drain-node`).
	BGPDrainGrace = 2 * time.Second
	bgpPassword   = "lab-bgp-secret"
	// BGPBFDInterval and BGPBFDMultiplier are the fleet's BFD timers on both sides, as a
	// production fleet runs them: a balancer that hangs or loses its link is withdrawn after
	// about 300 ms instead of the hold time.
	BGPBFDInterval   = 100 * time.Millisecond
	BGPBFDMultiplier = 3
	// BGPRestartTime is the graceful restart time the balancers announce.
	BGPRestartTime = 120 * time.Second
)

// BirdDir is where the lab's bird keeps its configuration and control socket.
func BirdDir(prefix string) string { return filepath.Join(StateDir(prefix), "bird") }

// routerConfig is bird's configuration: one passive session per balancer.
func routerConfig(t *topo.Topology) bird.Config {
	seg := t.Segment("lb")
	c := bird.Config{RouterID: seg.Router4, ASN: RouterASN, HoldTime: BGPHoldTime, GracefulRestart: true,
		BFD: &bird.BFD{MinRx: BGPBFDInterval, MinTx: BGPBFDInterval, Multiplier: BGPBFDMultiplier}}
	for _, n := range t.ByRole(topo.Balancer) {
		c.Neighbors = append(c.Neighbors, bird.Neighbor{Name: n.Name, Addr: n.Addr4, ASN: BalancerASN, Password: bgpPassword})
	}
	return c
}

// startRouter writes bird's configuration and starts it in the router namespace.
func startRouter(st *State, start func(name, ns string, argv ...string) error) error {
	if err := bird.Available(); err != nil {
		return fmt.Errorf("lab up: the router runs bird2 for BGP: %w; or use --static-routes", err)
	}
	dir := BirdDir(st.Prefix)
	if err := bird.Write(dir, routerConfig(st.Topo)); err != nil {
		return err
	}
	if err := start("bird", st.Topo.RouterNS, bird.Argv(dir)...); err != nil {
		return err
	}
	if err := bird.WaitReady(dir, 10*time.Second); err != nil {
		return fmt.Errorf("lab up: %w (see bird.log in %s)", err, StateDir(st.Prefix))
	}
	st.Running["rt"] = "bird"
	return nil
}

// BGPFor is balancer n's bgp section: one session to the router, its own addresses as next hops.
func BGPFor(t *topo.Topology, n topo.Node) *config.BGP {
	seg := t.Segment(n.Segment)
	bfd := &config.BFD{MinRx: config.Duration(BGPBFDInterval), MinTx: config.Duration(BGPBFDInterval), Multiplier: BGPBFDMultiplier}
	return &config.BGP{ASN: BalancerASN, RouterID: n.Addr4.String(), NextHop: n.Addr4.String(), NextHop6: n.Addr6.String(),
		RoutePolicy: config.RoutePolicy{Communities: []string{fmt.Sprintf("%d:100", BalancerASN)}}, Node: n.Name, Labels: BalancerLabels(t, n), DrainGrace: config.Duration(BGPDrainGrace),
		GracefulRestart: &config.GracefulRestart{RestartTime: config.Duration(BGPRestartTime)},
		Peers: []config.BGPPeer{{Address: seg.Router4.String(), ASN: RouterASN, HoldTime: config.Duration(BGPHoldTime),
			Password: bgpPassword, BFD: bfd}}}
}

// L7Label is the label of the balancers that announce the L7 VIP: every balancer but the last
// (lb1 alone in a lab of two), so that the lab shows a VIP announced by a subset of its nodes.
const L7Label = "l7"

// BalancerLabels are balancer n's bgp.labels.
func BalancerLabels(t *topo.Topology, n topo.Node) []string {
	lbs := t.ByRole(topo.Balancer)
	for i, b := range lbs {
		if b.Name == n.Name && (i < len(lbs)-1 || len(lbs) == 1) {
			return []string{L7Label}
		}
	}
	return nil
}

// routePolicies gives the lab's VIPs their route policies: web and echo (one address) and web6
// each their own community, the L7 VIP a community, a large community and announce_from the
// balancers labelled L7Label. `birdc show route all` shows them at the router.
func routePolicies(vips []VIP) {
	for i := range vips {
		switch vips[i].Name {
		case "web", "echo":
			vips[i].BGP = &config.VIPBGP{RoutePolicy: config.RoutePolicy{Communities: []string{fmt.Sprintf("%d:201", BalancerASN)}}}
		case "web6":
			vips[i].BGP = &config.VIPBGP{RoutePolicy: config.RoutePolicy{Communities: []string{fmt.Sprintf("%d:206", BalancerASN)}}}
		case "l7", "l7tls", "l7quic": // one address, one route
			vips[i].BGP = &config.VIPBGP{RoutePolicy: config.RoutePolicy{Communities: []string{fmt.Sprintf("%d:300", BalancerASN)},
				LargeCommunities: []string{fmt.Sprintf("%d:7:1", BalancerASN)}}, AnnounceFrom: []string{L7Label}}
		}
	}
}

// announcers are the balancers of want that announce prefix p: those that some VIP on its
// address announces from (announce_from).
func (l *Lab) announcers(p netip.Prefix, want []topo.Node) []topo.Node {
	var out []topo.Node
	for _, n := range want {
		id := config.Node{Name: n.Name, Labels: BalancerLabels(l.Topo, n)}
		for _, v := range l.VIPs {
			cv := config.VIP{BGP: v.BGP}
			if v.Address == p.Addr().String() && cv.Announces(id) {
				out = append(out, n)
				break
			}
		}
	}
	return out
}

// VIPPrefixes are the /32 and /128 of the lab's VIP addresses.
func (l *Lab) VIPPrefixes() []netip.Prefix {
	seen := map[netip.Addr]bool{}
	var out []netip.Prefix
	for _, v := range l.VIPs {
		a, err := netip.ParseAddr(v.Address) // Key is not saved in the state file
		if err != nil {
			continue
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		}
	}
	return out
}

// WaitVIPRoutes waits until the router's kernel routes every VIP prefix through exactly the
// balancers in want that announce it (announce_from), learned over BGP, and returns how long it
// took.
func (l *Lab) WaitVIPRoutes(want []topo.Node, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	var missing []string
	for {
		missing = missing[:0]
		for _, p := range l.VIPPrefixes() {
			via, err := topo.RouteVia(l.Topo.RouterNS, p)
			if err != nil {
				return 0, err
			}
			if !sameHops(via, l.announcers(p, want), p.Addr().Is4()) {
				missing = append(missing, fmt.Sprintf("%s via %v", p, via))
			}
		}
		if len(missing) == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return 0, fmt.Errorf("the router's VIP routes did not converge on %d balancers within %s: %s", len(want), timeout, strings.Join(missing, ", "))
		}
		time.Sleep(10 * time.Millisecond) // netlink reads: cheap, and withdrawals are timed in tens of ms
	}
}

func sameHops(via []netip.Addr, want []topo.Node, v4 bool) bool {
	if len(via) != len(want) {
		return false
	}
	m := map[netip.Addr]bool{}
	for _, a := range via {
		m[a] = true
	}
	for _, n := range want {
		a := n.Addr6
		if v4 {
			a = n.Addr4
		}
		if !m[a] {
			return false
		}
	}
	return true
}

// BGPStatus is the router's side of BGP in `lab status`: bird's sessions and routes, and the
// routes its kernel protocol installed (ECMP next hops).
type BGPStatus struct {
	Sessions []bird.Protocol `json:"sessions"`
	Routes   []bird.Route    `json:"routes"`
	Kernel   []KernelRoute   `json:"kernel_routes"`
	Error    string          `json:"error,omitempty"`
}

// KernelRoute is one VIP route in the router's kernel table.
type KernelRoute struct {
	Prefix string   `json:"prefix"`
	Via    []string `json:"via"`
}

func getBGPStatus(st *State) *BGPStatus {
	out := &BGPStatus{}
	dir := BirdDir(st.Prefix)
	ps, err := bird.Protocols(dir)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	for _, p := range ps {
		if p.Proto == "BGP" {
			out.Sessions = append(out.Sessions, p)
		}
	}
	if out.Routes, err = bird.Routes(dir); err != nil {
		out.Error = err.Error()
	}
	for _, p := range st.Lab().VIPPrefixes() {
		via, _ := topo.RouteVia(st.Topo.RouterNS, p)
		kr := KernelRoute{Prefix: p.String(), Via: []string{}}
		for _, a := range via {
			kr.Via = append(kr.Via, a.String())
		}
		sort.Strings(kr.Via)
		out.Kernel = append(out.Kernel, kr)
	}
	return out
}

func (b *BGPStatus) print(w io.Writer) {
	fmt.Fprintf(w, "\nBGP (router: bird2, AS %d)\n", RouterASN)
	if b.Error != "" {
		fmt.Fprintf(w, "  birdc: %s\n", b.Error)
	}
	for _, s := range b.Sessions {
		fmt.Fprintf(w, "  session %-6s %-6s since %-12s %s\n", s.Name, s.State, s.Since, s.Info)
	}
	for _, r := range b.Kernel {
		fmt.Fprintf(w, "  route %-22s via %s\n", r.Prefix, l4OrNone(strings.Join(r.Via, " ")))
	}
}

func l4OrNone(s string) string {
	if s == "" {
		return "(none: withdrawn)"
	}
	return s
}
