package topo

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/internal/namednetns"
)

// Role is what a namespace is for.
type Role string

// The roles of the lab's namespaces.
const (
	Router   Role = "router"
	Client   Role = "client"
	Balancer Role = "balancer"
	Backend  Role = "backend"
	DNS      Role = "dns"
	Edge     Role = "edge"
	L7       Role = "l7"
)

// Segment is one layer-2 segment: a bridge in the router namespace with the router's address on
// it, and a veth per host.
type Segment struct {
	Name   string       `json:"name"`
	Bridge string       `json:"bridge"`
	Net4   netip.Prefix `json:"net4"`
	Net6   netip.Prefix `json:"net6"`
	// Router4/Router6 are the router's addresses on the segment: the hosts' gateway.
	Router4 netip.Addr `json:"router4"`
	Router6 netip.Addr `json:"router6"`
	// RouterMAC is the bridge's MAC, fixed so that the forwarder's next hop is known in advance.
	RouterMAC string `json:"router_mac"`
}

// Node is one host namespace attached to a segment through its interface eth0.
type Node struct {
	// NS is the namespace name; Name is the short host name (be1, c1, lb1).
	NS      string `json:"ns"`
	Name    string `json:"name"`
	Role    Role   `json:"role"`
	Segment string `json:"segment"`
	// Iface is the host's interface (eth0); Port is its peer, a bridge port in the router.
	Iface string     `json:"iface"`
	Port  string     `json:"port"`
	Addr4 netip.Addr `json:"addr4"`
	Addr6 netip.Addr `json:"addr6"`
	// Loopback holds extra addresses on lo (the VIPs a backend answers for, DSR).
	Loopback []netip.Addr `json:"loopback,omitempty"`
}

// Route is a route in the router namespace toward a host (VIP prefixes toward the balancers).
type Route struct {
	Dst netip.Prefix `json:"dst"`
	// Via lists next hops; more than one makes an ECMP route.
	Via []netip.Addr `json:"via"`
}

// Topology is the whole lab network.
type Topology struct {
	// Prefix starts every namespace name ("sy" gives sy-rt, sy-c1...), so that a test can build
	// its own lab beside a running one.
	Prefix   string    `json:"prefix"`
	RouterNS string    `json:"router_ns"`
	Segments []Segment `json:"segments"`
	Nodes    []Node    `json:"nodes"`
	Routes   []Route   `json:"routes"`
}

// Spec says how many hosts of each kind the lab has.
type Spec struct {
	Prefix    string
	Clients   int
	Balancers int
	Backends  int
	// L7 is the number of L7 proxy instances (they sit behind their own L4 VIP).
	L7 int
	// DNS and Edge add a namespace for the DNS server and for the edge cache.
	DNS  bool
	Edge bool
	// Loopback addresses every backend (and every L7 instance) answers for.
	BackendVIPs []netip.Addr
	L7VIPs      []netip.Addr
	// VIPRoutes are routed by the router to the balancers (ECMP when several).
	VIPRoutes []netip.Prefix
	// EncapRoutes are the outer source ranges of the balancers' tunnels, routed back to them so
	// that the router's reverse-path checks accept them.
	EncapRoutes []netip.Prefix
}

// Segment indexes: the third octet of the segment's IPv4 /24 and the third group of its IPv6 /64.
const (
	segClients  = 1
	segLB       = 2
	segBackends = 3
	segServices = 4
)

func segment(name string, idx int) Segment {
	return Segment{
		Name:      name,
		Bridge:    "br-" + name,
		Net4:      netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/24", idx)),
		Net6:      netip.MustParsePrefix(fmt.Sprintf("fd00:5e:%d::/64", idx)),
		Router4:   netip.MustParseAddr(fmt.Sprintf("198.18.%d.1", idx)),
		Router6:   netip.MustParseAddr(fmt.Sprintf("fd00:5e:%d::1", idx)),
		RouterMAC: fmt.Sprintf("02:5e:00:00:%02x:01", idx),
	}
}

// Plan computes the topology of a spec: deterministic names and addresses, nothing created.
// Host h (10 < h < 250) of segment s has 198.18.s.h and fd00:5e:s::h.
func Plan(s Spec) (*Topology, error) {
	if s.Prefix == "" || len(s.Prefix) > 8 || strings.ContainsAny(s.Prefix, "/ .") {
		return nil, fmt.Errorf("plan lab: prefix %q must be 1..8 characters without '/', '.' or spaces (e.g. sy)", s.Prefix)
	}
	if s.Clients < 1 || s.Balancers < 1 || s.Backends < 1 {
		return nil, fmt.Errorf("plan lab: need at least one client, balancer and backend (got %d, %d, %d)", s.Clients, s.Balancers, s.Backends)
	}
	if s.Clients > 50 || s.Balancers > 8 || s.Backends+s.L7 > 100 {
		return nil, errors.New("plan lab: at most 50 clients, 8 balancers and 100 backends plus L7 instances")
	}
	t := &Topology{Prefix: s.Prefix, RouterNS: s.Prefix + "-rt"}
	t.Segments = []Segment{segment("cli", segClients), segment("lb", segLB), segment("be", segBackends)}
	if s.DNS || s.Edge {
		t.Segments = append(t.Segments, segment("svc", segServices))
	}
	add := func(name string, role Role, seg, host int, lo []netip.Addr) {
		t.Nodes = append(t.Nodes, Node{
			NS: s.Prefix + "-" + name, Name: name, Role: role, Segment: t.Segments[seg-1].Name,
			Iface: "eth0", Port: name,
			Addr4:    netip.MustParseAddr(fmt.Sprintf("198.18.%d.%d", seg, host)),
			Addr6:    netip.MustParseAddr(fmt.Sprintf("fd00:5e:%d::%d", seg, host)),
			Loopback: lo,
		})
	}
	for i := 1; i <= s.Clients; i++ {
		add(fmt.Sprintf("c%d", i), Client, segClients, 10+i, nil)
	}
	var lbs4, lbs6 []netip.Addr
	for i := 1; i <= s.Balancers; i++ {
		add(fmt.Sprintf("lb%d", i), Balancer, segLB, 10+i, nil)
		n := t.Nodes[len(t.Nodes)-1]
		lbs4, lbs6 = append(lbs4, n.Addr4), append(lbs6, n.Addr6)
	}
	for i := 1; i <= s.Backends; i++ {
		add(fmt.Sprintf("be%d", i), Backend, segBackends, 10+i, s.BackendVIPs)
	}
	for i := 1; i <= s.L7; i++ {
		add(fmt.Sprintf("l7%c", 'a'+i-1), L7, segBackends, 150+i, s.L7VIPs)
	}
	if s.DNS {
		add("dns", DNS, segServices, 53, nil)
	}
	if s.Edge {
		add("edge", Edge, segServices, 80, nil)
	}
	for _, p := range append(append([]netip.Prefix{}, s.VIPRoutes...), s.EncapRoutes...) {
		if p.Addr().Is4() {
			t.Routes = append(t.Routes, Route{Dst: p, Via: lbs4})
		} else {
			t.Routes = append(t.Routes, Route{Dst: p, Via: lbs6})
		}
	}
	return t, nil
}

// Node finds a node by short name or namespace name.
func (t *Topology) Node(name string) (Node, bool) {
	for _, n := range t.Nodes {
		if n.Name == name || n.NS == name {
			return n, true
		}
	}
	return Node{}, false
}

// ByRole lists the nodes of a role in plan order.
func (t *Topology) ByRole(r Role) []Node {
	var out []Node
	for _, n := range t.Nodes {
		if n.Role == r {
			out = append(out, n)
		}
	}
	return out
}

// Segment finds a segment by name.
func (t *Topology) Segment(name string) Segment {
	for _, s := range t.Segments {
		if s.Name == name {
			return s
		}
	}
	return Segment{}
}

// Namespaces lists every namespace of the topology, router first.
func (t *Topology) Namespaces() []string {
	out := []string{t.RouterNS}
	for _, n := range t.Nodes {
		out = append(out, n.NS)
	}
	return out
}

// Build creates what the plan describes. It is idempotent: namespaces, links, addresses and
// routes that exist already are kept. It needs root.
func (t *Topology) Build() error {
	if err := namednetns.Create(t.RouterNS); err != nil {
		return err
	}
	rt, err := handle(t.RouterNS)
	if err != nil {
		return err
	}
	defer rt.Close()
	// Forwarding on; reverse-path filtering off (tunnel sources come from the balancers);
	// ECMP hashing on the 5-tuple so that several balancers share the VIP routes per flow.
	for _, kv := range [][2]string{
		{"net.ipv4.ip_forward", "1"}, {"net.ipv6.conf.all.forwarding", "1"},
		{"net.ipv4.conf.all.rp_filter", "0"}, {"net.ipv4.conf.default.rp_filter", "0"},
		{"net.ipv4.fib_multipath_hash_policy", "1"}, {"net.ipv6.fib_multipath_hash_policy", "1"},
	} {
		if err := Sysctl(t.RouterNS, kv[0], kv[1]); err != nil {
			return err
		}
	}
	// The router is a plain fabric: no netfilter on bridged frames. With br_netfilter in the
	// kernel (built in, or loaded on a host that runs containers), every frame entering a lab
	// bridge would otherwise run the IPv4/IPv6/ARP hooks on top of the bridge (an skb extension
	// and a route lookup of its own per frame) although the router has no rule, and a path with
	// more router crossings (a balancer's) would pay it more often. The NAT balancer of the
	// benchmark keeps its rules in its own namespace.
	for _, k := range []string{"net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables", "net.bridge.bridge-nf-call-arptables"} {
		if err := sysctlIfPresent(t.RouterNS, k, "0"); err != nil {
			return err
		}
	}
	if err := setLoUp(rt); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	for _, s := range t.Segments {
		if err := t.buildSegment(rt, s); err != nil {
			return err
		}
	}
	for _, n := range t.Nodes {
		if err := t.buildNode(rt, n); err != nil {
			return err
		}
	}
	for _, r := range t.Routes {
		if err := addRoute(rt, r.Dst, r.Via); err != nil {
			return fmt.Errorf("router route %s: %w", r.Dst, err)
		}
	}
	return nil
}

func handle(ns string) (*netlink.Handle, error) {
	h, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("open namespace %s: %w", ns, err)
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("open netlink in %s: %w", ns, err)
	}
	return nh, nil
}

func setLoUp(h *netlink.Handle) error {
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

func (t *Topology) buildSegment(rt *netlink.Handle, s Segment) error {
	br, err := rt.LinkByName(s.Bridge)
	if err != nil {
		mac, _ := net.ParseMAC(s.RouterMAC)
		la := netlink.NewLinkAttrs()
		la.Name = s.Bridge
		la.HardwareAddr = mac
		if err := rt.LinkAdd(&netlink.Bridge{LinkAttrs: la}); err != nil {
			return fmt.Errorf("create bridge %s: %w", s.Bridge, err)
		}
		if br, err = rt.LinkByName(s.Bridge); err != nil {
			return fmt.Errorf("find bridge %s: %w", s.Bridge, err)
		}
	}
	for _, a := range []netip.Prefix{
		netip.PrefixFrom(s.Router4, s.Net4.Bits()), netip.PrefixFrom(s.Router6, s.Net6.Bits()),
	} {
		if err := addAddr(rt, br, a); err != nil {
			return fmt.Errorf("bridge %s: %w", s.Bridge, err)
		}
	}
	if err := rt.LinkSetUp(br); err != nil {
		return fmt.Errorf("set %s up: %w", s.Bridge, err)
	}
	return nil
}

func (t *Topology) buildNode(rt *netlink.Handle, n Node) error {
	if err := namednetns.Create(n.NS); err != nil {
		return err
	}
	h, err := handle(n.NS)
	if err != nil {
		return err
	}
	defer h.Close()
	seg := t.Segment(n.Segment)
	if err := t.buildPort(rt, n, seg); err != nil {
		return err
	}
	return buildHost(h, n, seg)
}

// buildPort makes the node's veth (the router end, n.Port, on the segment's bridge, and the host
// end, n.Iface, in the node's namespace), up and with plain offloads on the router side.
func (t *Topology) buildPort(rt *netlink.Handle, n Node, seg Segment) error {
	if _, err := rt.LinkByName(n.Port); err != nil {
		nsh, err := netns.GetFromName(n.NS)
		if err != nil {
			return fmt.Errorf("open namespace %s: %w", n.NS, err)
		}
		la := netlink.NewLinkAttrs()
		la.Name = n.Port
		v := &netlink.Veth{LinkAttrs: la, PeerName: n.Iface, PeerNamespace: netlink.NsFd(nsh)}
		err = rt.LinkAdd(v)
		nsh.Close()
		if err != nil {
			return fmt.Errorf("create veth %s/%s for %s: %w", n.Port, n.Iface, n.NS, err)
		}
	}
	port, err := rt.LinkByName(n.Port)
	if err != nil {
		return fmt.Errorf("find port %s: %w", n.Port, err)
	}
	br, err := rt.LinkByName(seg.Bridge)
	if err != nil {
		return fmt.Errorf("find bridge %s: %w", seg.Bridge, err)
	}
	if err := rt.LinkSetMaster(port, br); err != nil {
		return fmt.Errorf("attach %s to %s: %w", n.Port, seg.Bridge, err)
	}
	if err := rt.LinkSetUp(port); err != nil {
		return fmt.Errorf("set %s up: %w", n.Port, err)
	}
	return namednetns.DoNamed(t.RouterNS, func() error { return plainOffloads(n.Port) })
}

// buildHost configures the node's side: sysctls, lo, its interface's addresses and offloads,
// loopback addresses and default routes via the segment's router.
func buildHost(h *netlink.Handle, n Node, seg Segment) error {
	// Hosts: sysctls first, so that addresses come up without duplicate address detection and
	// decapsulated packets from any source are accepted (DSR).
	for k, v := range map[string]string{
		"net.ipv4.conf.all.rp_filter":      "0",
		"net.ipv4.conf.default.rp_filter":  "0",
		"net.ipv6.conf.all.accept_dad":     "0",
		"net.ipv6.conf.default.accept_dad": "0",
	} {
		if err := Sysctl(n.NS, k, v); err != nil {
			return err
		}
	}
	if err := setLoUp(h); err != nil {
		return fmt.Errorf("%s: %w", n.NS, err)
	}
	eth, err := h.LinkByName(n.Iface)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", n.Iface, n.NS, err)
	}
	if err := Sysctl(n.NS, "net.ipv4.conf."+n.Iface+".rp_filter", "0"); err != nil {
		return err
	}
	if err := namednetns.DoNamed(n.NS, func() error { return plainOffloads(n.Iface) }); err != nil {
		return err
	}
	for _, a := range []netip.Prefix{netip.PrefixFrom(n.Addr4, seg.Net4.Bits()), netip.PrefixFrom(n.Addr6, seg.Net6.Bits())} {
		if err := addAddr(h, eth, a); err != nil {
			return fmt.Errorf("%s: %w", n.NS, err)
		}
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("set %s up in %s: %w", n.Iface, n.NS, err)
	}
	lo, _ := h.LinkByName("lo")
	for _, a := range n.Loopback {
		if err := addAddr(h, lo, netip.PrefixFrom(a, a.BitLen())); err != nil {
			return fmt.Errorf("%s lo: %w", n.NS, err)
		}
	}
	for _, gw := range []netip.Addr{seg.Router4, seg.Router6} {
		def := netip.MustParsePrefix("0.0.0.0/0")
		if gw.Is6() {
			def = netip.MustParsePrefix("::/0")
		}
		if err := addRoute(h, def, []netip.Addr{gw}); err != nil {
			return fmt.Errorf("%s default route: %w", n.NS, err)
		}
	}
	return nil
}

func addAddr(h *netlink.Handle, l netlink.Link, p netip.Prefix) error {
	a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrReplace(l, a); err != nil {
		return fmt.Errorf("add address %s to %s: %w", p, l.Attrs().Name, err)
	}
	return nil
}

// addRoute replaces a route to dst through one or more next hops (ECMP when several).
func addRoute(h *netlink.Handle, dst netip.Prefix, via []netip.Addr) error {
	if len(via) == 0 {
		return fmt.Errorf("route %s has no next hop", dst)
	}
	r := &netlink.Route{Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}}
	if len(via) == 1 {
		r.Gw = via[0].AsSlice()
	} else {
		for _, v := range via {
			r.MultiPath = append(r.MultiPath, &netlink.NexthopInfo{Gw: v.AsSlice()})
		}
	}
	if err := h.RouteReplace(r); err != nil {
		return fmt.Errorf("replace route %s via %v: %w", dst, via, err)
	}
	return nil
}

// SetRoute replaces a route in a namespace (the benchmark points the VIP straight at the
// backends to measure the direct path).
func SetRoute(ns string, dst netip.Prefix, via []netip.Addr) error {
	h, err := handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	return addRoute(h, dst, via)
}

// AddLoopback adds an address to lo in a namespace (idempotent).
func AddLoopback(ns string, a netip.Addr) error {
	h, err := handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo in %s: %w", ns, err)
	}
	return addAddr(h, lo, netip.PrefixFrom(a, a.BitLen()))
}

// Destroy removes every namespace whose name starts with prefix+"-", the router last; the
// veths and bridges go with their namespaces.
func Destroy(prefix string) error {
	names, err := namednetns.List(prefix + "-")
	if err != nil {
		return err
	}
	sort.Slice(names, func(i, j int) bool { return names[i] != prefix+"-rt" && names[j] == prefix+"-rt" })
	var errs []error
	for _, n := range names {
		errs = append(errs, namednetns.Remove(n))
	}
	return errors.Join(errs...)
}

// Iface is the live state of an interface, for status.
type Iface struct {
	Name  string   `json:"name"`
	MAC   string   `json:"mac"`
	MTU   int      `json:"mtu"`
	Up    bool     `json:"up"`
	Addrs []string `json:"addrs"`
	// XDP is the id of the attached XDP program, 0 when none.
	XDP uint32 `json:"xdp_prog_id,omitempty"`
}

// Interfaces reads the interfaces of a namespace and their global addresses.
func Interfaces(ns string) ([]Iface, error) {
	h, err := handle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links in %s: %w", ns, err)
	}
	var out []Iface
	for _, l := range links {
		a := l.Attrs()
		f := Iface{Name: a.Name, MAC: a.HardwareAddr.String(), MTU: a.MTU, Up: a.Flags&net.FlagUp != 0}
		if a.Xdp != nil && a.Xdp.Attached {
			f.XDP = a.Xdp.ProgId
		}
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("list addresses of %s in %s: %w", a.Name, ns, err)
		}
		for _, ad := range addrs {
			if ad.IP.IsLinkLocalUnicast() || ad.IP.IsLoopback() {
				continue
			}
			f.Addrs = append(f.Addrs, ad.IPNet.String())
		}
		out = append(out, f)
	}
	return out, nil
}

// LinkStats reads an interface's packet and byte counters in a namespace.
func LinkStats(ns, ifname string) (*netlink.LinkStatistics, error) {
	h, err := handle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("find %s in %s: %w", ifname, ns, err)
	}
	if l.Attrs().Statistics == nil {
		return nil, fmt.Errorf("no statistics for %s in %s", ifname, ns)
	}
	return (*netlink.LinkStatistics)(l.Attrs().Statistics), nil
}

// MAC reads an interface's MAC in a namespace.
func MAC(ns, ifname string) (net.HardwareAddr, error) {
	h, err := handle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("find %s in %s: %w", ifname, ns, err)
	}
	return l.Attrs().HardwareAddr, nil
}

// FlushConntrack empties the connection-tracking table of a namespace: a benchmark of a NAT
// balancer starts each round without the previous round's TIME_WAIT entries.
func FlushConntrack(ns string) error {
	h, err := handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	if err := h.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
		return fmt.Errorf("flush conntrack in %s: %w", ns, err)
	}
	return nil
}

// SetLink sets node n's interface down, as a cut cable or a dead NIC on the node's side, or up
// again with its addresses and default routes (the kernel drops the routes, and IPv6 addresses,
// of an interface that goes down).
func (t *Topology) SetLink(n Node, up bool) error {
	h, err := handle(n.NS)
	if err != nil {
		return err
	}
	defer h.Close()
	if up {
		return buildHost(h, n, t.Segment(n.Segment))
	}
	eth, err := h.LinkByName(n.Iface)
	if err != nil {
		return fmt.Errorf("find %s in %s: %w", n.Iface, n.NS, err)
	}
	if err := h.LinkSetDown(eth); err != nil {
		return fmt.Errorf("set %s down in %s: %w", n.Iface, n.NS, err)
	}
	return nil
}
