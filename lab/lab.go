// Package lab puts switchyard on the topology of package topo: the XDP_PASS program on the
// router ports that receive the balancers' XDP_TX frames, the decap program and the VIPs on every
// backend, app servers, and a balancer (switchyard's daemon when the binary has one, else the
// forwarder driven directly by package fwd). `switchyard lab up|down|status|demo`, the end-to-end
// tests, the experiments and the L4 benchmark all build their lab through it.
package lab

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/fwd"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
	"github.com/switchyard/switchyard/maps"
)

// PinRoot holds every pin the lab makes: <PinRoot>/<ns>-<iface>.
const PinRoot = "/sys/fs/bpf/switchyard/lab"

// StateRoot holds each lab's state file, process pid files and logs: <StateRoot>/<prefix>/.
const StateRoot = "/run/switchyard/lab"

// Addresses of the lab's VIPs and tunnel sources.
var (
	WebVIP4  = netip.MustParseAddr("198.18.100.1")
	WebVIP6  = netip.MustParseAddr("fd00:5e:100::1")
	L7VIP    = netip.MustParseAddr("198.18.100.10")
	Encap4   = netip.MustParseAddr("198.18.255.0")
	Encap6   = netip.MustParseAddr("fd00:5e:ff::")
	vipNet4  = netip.MustParsePrefix("198.18.100.0/24")
	vipNet6  = netip.MustParsePrefix("fd00:5e:100::/64")
	encNet4  = netip.MustParsePrefix("198.18.255.0/24")
	encNet6  = netip.MustParsePrefix("fd00:5e:ff::/64")
	webPort  = uint16(80)
	echoPort = uint16(7)
)

// VIP is one VIP of the lab with the roles of the hosts behind it.
type VIP struct {
	Name     string       `json:"name"`
	Key      maps.VIPKey  `json:"-"`
	Address  string       `json:"address"`
	Port     uint16       `json:"port"`
	Protocol string       `json:"protocol"`
	ID       uint32       `json:"id"`
	Backends []netip.Addr `json:"backends"`
	// BGP is the VIP's route policy and announce_from in the daemon's configuration.
	BGP *config.VIPBGP `json:"bgp,omitempty"`
	// QUIC routes the VIP's QUIC packets by connection ID (QUIC-LB, the balancer's defaults):
	// backend i has server ID i+1 (ServerID), which the L7 proxy on it issues (stops.go).
	QUIC bool `json:"quic,omitempty"`
}

// ServerID is the QUIC server ID of the VIP's backend i.
func (v VIP) ServerID(i int) uint32 { return uint32(i + 1) }

func vip(name string, id uint32, a netip.Addr, port uint16, p maps.Proto, bes []netip.Addr) VIP {
	return VIP{Name: name, Key: maps.VIPKey{Addr: a, Port: port, Proto: p}, Address: a.String(), Port: port,
		Protocol: p.String(), ID: id, Backends: bes}
}

// Spec is the size of a lab; the zero value of a field takes the default.
type Spec struct {
	Prefix    string
	Clients   int
	Balancers int
	Backends  int
	L7        int
	DNS, Edge bool
	// BGP makes the router learn the VIP routes from the balancers' daemons over BGP (bird2);
	// without it the router has static ECMP routes to every balancer (tests that drive the
	// forwarder directly, `lab up --balancer direct` or `--static-routes`).
	BGP bool
}

// DefaultSpec is `switchyard lab up` with no flags: two clients, two balancers announcing the
// VIPs over BGP, three backends, two L7 instances, a DNS and an edge namespace.
func DefaultSpec() Spec {
	return Spec{Prefix: "sy", Clients: 2, Balancers: 2, Backends: 3, L7: 2, DNS: true, Edge: true, BGP: true}
}

// Lab is a planned (and maybe built) lab.
type Lab struct {
	Topo *topo.Topology
	VIPs []VIP
	// BGP: the VIP routes come from the balancers over BGP, not from static routes.
	BGP bool
}

// Plan computes the lab of a spec: topology and VIPs.
func Plan(s Spec) (*Lab, error) {
	vipRoutes := []netip.Prefix{vipNet4, vipNet6}
	if s.BGP {
		vipRoutes = nil // learned from the balancers
	}
	t, err := topo.Plan(topo.Spec{
		Prefix: s.Prefix, Clients: s.Clients, Balancers: s.Balancers, Backends: s.Backends, L7: s.L7,
		DNS: s.DNS, Edge: s.Edge,
		BackendVIPs: []netip.Addr{WebVIP4, WebVIP6}, L7VIPs: []netip.Addr{L7VIP},
		VIPRoutes: vipRoutes, EncapRoutes: []netip.Prefix{encNet4, encNet6},
	})
	if err != nil {
		return nil, err
	}
	l := &Lab{Topo: t, BGP: s.BGP}
	var b4, b6, l7 []netip.Addr
	for _, n := range t.ByRole(topo.Backend) {
		b4, b6 = append(b4, n.Addr4), append(b6, n.Addr6)
	}
	for _, n := range t.ByRole(topo.L7) {
		l7 = append(l7, n.Addr4)
	}
	l.VIPs = []VIP{
		vip("web", 0, WebVIP4, webPort, maps.TCP, b4),
		vip("web6", 1, WebVIP6, webPort, maps.TCP, b6),
		vip("echo", 2, WebVIP4, echoPort, maps.UDP, b4),
	}
	if len(l7) > 0 {
		l.VIPs = append(l.VIPs, vip("l7", 3, L7VIP, webPort, maps.TCP, l7))
	}
	if len(l7) > 0 && s.DNS && s.Edge {
		// The L7 tier's front door (HTTPS and HTTP/3 with a certificate from the lab's ACME
		// CA, which needs the DNS stop; acme.go): TCP and QUIC on 443 of the L7 VIP.
		h3 := vip("l7quic", 5, L7VIP, tlsPort, maps.UDP, l7)
		h3.QUIC = true
		l.VIPs = append(l.VIPs, vip("l7tls", 4, L7VIP, tlsPort, maps.TCP, l7), h3)
	}
	routePolicies(l.VIPs)
	return l, nil
}

// PinDir is the lab's pin directory of an interface in a namespace.
func PinDir(ns, iface string) string { return filepath.Join(PinRoot, ns+"-"+iface) }

// StateDir is where a lab keeps its state, pid files and logs.
func StateDir(prefix string) string { return filepath.Join(StateRoot, prefix) }

// Build creates the topology and loads the programs every host needs: XDP_PASS on the router
// ports of the balancers (a veth drops XDP_TX frames unless the receiving peer runs an XDP
// program) and the decap program with the host's own addresses on every backend and L7 host.
// It is idempotent.
func (l *Lab) Build() error {
	if os.Geteuid() != 0 {
		return errors.New("build lab: needs root (network namespaces and BPF)")
	}
	if err := l.Topo.Build(); err != nil {
		return fmt.Errorf("build lab: %w", err)
	}
	if err := l.attachPortPass(l.Topo.ByRole(topo.Balancer)); err != nil {
		return err
	}
	hosts := append(l.Topo.ByRole(topo.Backend), l.Topo.ByRole(topo.L7)...)
	peers := l.secondChancePeers(hosts)
	for _, n := range hosts {
		if err := attachDecap(n, peers); err != nil {
			return fmt.Errorf("build lab: %w", err)
		}
	}
	return nil
}

// secondChancePeers is the allow-list of second-chance candidates of the lab's decap programs:
// the networks of the segments its backends and L7 hosts are on.
func (l *Lab) secondChancePeers(hosts []topo.Node) []netip.Prefix {
	var out []netip.Prefix
	seen := map[string]bool{}
	for _, n := range hosts {
		if !seen[n.Segment] {
			seen[n.Segment] = true
			seg := l.Topo.Segment(n.Segment)
			out = append(out, seg.Net4, seg.Net6)
		}
	}
	return out
}

// attachDecap loads decap on a host with its own addresses, the second-chance peers and the
// balancers' encap source ranges as the allowed tunnel sources (docs/xdp.md, "Second chance").
func attachDecap(n topo.Node, peers []netip.Prefix) error {
	pin := PinDir(n.NS, n.Iface)
	return namednetns.DoNamed(n.NS, func() error {
		d, err := loader.OpenDecap(pin)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := d.SetAddrs([]netip.Addr{n.Addr4, n.Addr6}); err != nil {
			return err
		}
		if err := d.SetSecondChance(peers, []netip.Prefix{encNet4, encNet6}); err != nil {
			return err
		}
		lk, err := d.Attach(n.Iface, loader.Native, pin)
		if err != nil {
			return fmt.Errorf("decap on %s: %w", n.NS, err)
		}
		return lk.Close()
	})
}

// DecapCounters reads the decap counters of a backend.
func DecapCounters(n topo.Node) (map[string]bpfobj.LBCounter, error) {
	var out map[string]bpfobj.LBCounter
	err := namednetns.DoNamed(n.NS, func() error {
		d, err := loader.OpenDecap(PinDir(n.NS, n.Iface))
		if err != nil {
			return err
		}
		defer d.Close()
		out, err = d.Counters()
		return err
	})
	return out, err
}

// Balancer returns the first balancer node.
func (l *Lab) Balancer() topo.Node { return l.Topo.ByRole(topo.Balancer)[0] }

// Client returns client i (1-based).
func (l *Lab) Client(i int) topo.Node { return l.Topo.ByRole(topo.Client)[i-1] }

// VIP finds a VIP by name.
func (l *Lab) VIP(name string) VIP {
	for _, v := range l.VIPs {
		if v.Name == name {
			return v
		}
	}
	return VIP{}
}

// StartForwarder loads the forwarder on balancer n directly (no daemon), pinned in the lab's pin
// directory, and puts every VIP of the lab with weight-1 backends.
func (l *Lab) StartForwarder(n topo.Node, ringSize uint32) (*fwd.Forwarder, error) {
	seg := l.Topo.Segment(n.Segment)
	mac, err := net.ParseMAC(seg.RouterMAC)
	if err != nil {
		return nil, fmt.Errorf("parse router mac: %w", err)
	}
	f, err := fwd.Start(fwd.Options{
		NS: n.NS, Iface: n.Iface, PinDir: PinDir(n.NS, n.Iface), RingSize: ringSize,
		NextHopMAC: mac, Src4: Encap4, Src6: Encap6,
	})
	if err != nil {
		return nil, err
	}
	sids := map[uint32]uint32{}
	for _, v := range l.VIPs {
		bes := make([]fwd.Backend, len(v.Backends))
		for i, a := range v.Backends {
			bes[i] = fwd.Backend{Addr: a, Weight: 1}
		}
		var flags maps.VIPFlags
		if v.QUIC {
			flags, _ = maps.QUICLBFlags(config.DefaultQUICServerIDLen, 0) // in range: they are the defaults
		}
		if err := f.SetVIP(v.Key, v.ID, flags, bes); err != nil {
			f.Close()
			return nil, err
		}
		if v.QUIC {
			for i, a := range v.Backends {
				id, err := f.BackendID(a)
				if err != nil {
					f.Close()
					return nil, err
				}
				sids[v.ServerID(i)] = id
			}
		}
	}
	if len(sids) > 0 {
		if err := f.Maps.SetQUICServers(sids); err != nil {
			f.Close()
			return nil, fmt.Errorf("set quic server ids: %w", err)
		}
	}
	return f, nil
}

// Destroy removes every pin, process and namespace of the lab with this prefix. It works from
// the prefix alone, so it cleans up after a crash too.
func Destroy(prefix string) error {
	var errs []error
	errs = append(errs, StopProcesses(prefix))
	ents, _ := os.ReadDir(PinRoot)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			p := filepath.Join(PinRoot, e.Name())
			if err := loader.Detach(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, topo.Destroy(prefix))
	if err := os.RemoveAll(StateDir(prefix)); err != nil {
		errs = append(errs, fmt.Errorf("remove lab state: %w", err))
	}
	return errors.Join(errs...)
}
