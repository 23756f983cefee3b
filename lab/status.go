package lab

import (
	"fmt"
	"io"
	"net/netip"
	"sort"
	"strings"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/topo"
)

// NSStatus is one namespace of a running lab.
type NSStatus struct {
	Name       string       `json:"name"`
	Host       string       `json:"host"`
	Role       topo.Role    `json:"role"`
	Exists     bool         `json:"exists"`
	Interfaces []topo.Iface `json:"interfaces"`
	// Processes maps the processes the lab runs in the namespace to their pid (0: not running).
	Processes map[string]int `json:"processes,omitempty"`
}

// BackendStatus is one backend of a VIP.
type BackendStatus struct {
	Address string `json:"address"`
	Host    string `json:"host"`
	NS      string `json:"ns"`
}

// VIPStatus is one VIP with its backends.
type VIPStatus struct {
	VIP
	Backends []BackendStatus `json:"backends"`
	// Balancers are the namespaces whose forwarders serve the VIP.
	Balancers []string `json:"balancers"`
}

// Status is `switchyard lab status`: every namespace with its role, interfaces and addresses,
// and every VIP with its backends.
type Status struct {
	Prefix     string            `json:"prefix"`
	Up         bool              `json:"up"`
	Balancer   string            `json:"balancer_mode"`
	Namespaces []NSStatus        `json:"namespaces"`
	VIPs       []VIPStatus       `json:"vips"`
	Sockets    map[string]string `json:"sockets,omitempty"`
	// BGP is the router's BGP state (bgp.go); nil when the lab uses static routes.
	BGP   *BGPStatus `json:"bgp,omitempty"`
	Notes []string   `json:"notes,omitempty"`
	// Store is the lab's etcd cluster, when it runs one.
	Store *StoreState `json:"store,omitempty"`
	// UI and Prometheus are the URLs of the lab's web view and Prometheus (observe.go).
	UI         string `json:"ui,omitempty"`
	Prometheus string `json:"prometheus,omitempty"`
	// CDN is the Mini-CDN of a `lab up --cdn` lab (cdn.go).
	CDN *CDNState `json:"cdn,omitempty"`
}

// GetStatus reads the live state of a lab. A lab that is not up (or half torn down) gives
// Up false and whatever namespaces with the prefix remain.
func GetStatus(prefix string) (*Status, error) {
	out := &Status{Prefix: prefix}
	st, err := LoadState(prefix)
	if err != nil {
		names, lerr := namednetns.List(prefix + "-")
		if lerr != nil {
			return nil, lerr
		}
		for _, n := range names {
			out.Namespaces = append(out.Namespaces, NSStatus{Name: n, Exists: true})
		}
		return out, nil
	}
	procs, err := Running(prefix)
	if err != nil {
		return nil, err
	}
	if st.CDN != nil {
		return cdnStatus(st, procs, out), nil
	}
	out.Up, out.Balancer, out.Sockets, out.Notes = true, st.Balancer, st.Sockets, st.Notes
	out.UI, out.Prometheus = st.UI, st.Prometheus
	add := func(ns, host string, role topo.Role) {
		s := NSStatus{Name: ns, Host: host, Role: role, Exists: namednetns.Exists(ns)}
		if s.Exists {
			ifs, err := topo.Interfaces(ns)
			if err == nil {
				s.Interfaces = ifs
			}
		} else {
			out.Up = false
		}
		for _, p := range st.Procs {
			if p.NS == ns {
				if s.Processes == nil {
					s.Processes = map[string]int{}
				}
				s.Processes[p.Name] = procs[p.Name]
				if procs[p.Name] == 0 {
					out.Up = false
				}
			}
		}
		out.Namespaces = append(out.Namespaces, s)
	}
	add(st.Topo.RouterNS, "rt", topo.Router)
	for _, n := range st.Topo.Nodes {
		add(n.NS, n.Name, n.Role)
	}
	if out.Store = st.Store; st.Store != nil {
		add(st.Store.NS, "etcd", StoreRole)
	}
	var lbs []string
	for _, n := range st.Topo.ByRole(topo.Balancer) {
		lbs = append(lbs, n.NS)
	}
	for _, v := range st.VIPs {
		vs := VIPStatus{VIP: v, Balancers: lbs}
		for _, b := range v.Backends {
			n, _ := nodeByAddr(st.Topo, b)
			vs.Backends = append(vs.Backends, BackendStatus{Address: b.String(), Host: n.Name, NS: n.NS})
		}
		out.VIPs = append(out.VIPs, vs)
	}
	if st.BGP {
		out.BGP = getBGPStatus(st)
	}
	return out, nil
}

func nodeByAddr(t *topo.Topology, a netip.Addr) (topo.Node, bool) {
	for _, n := range t.Nodes {
		if n.Addr4 == a || n.Addr6 == a {
			return n, true
		}
	}
	return topo.Node{}, false
}

// Print writes the status as text.
func (s *Status) Print(w io.Writer) {
	if len(s.Namespaces) == 0 {
		fmt.Fprintf(w, "lab %q is down (start it with `switchyard lab up`)\n", s.Prefix)
		return
	}
	state := "up"
	if !s.Up {
		state = "DEGRADED or partly down (`switchyard lab down` cleans up, `lab up` rebuilds)"
	}
	fmt.Fprintf(w, "lab %q: %s, balancer: %s\n\n", s.Prefix, state, s.Balancer)
	fmt.Fprintf(w, "%-10s %-9s %-8s %-36s %s\n", "NAMESPACE", "ROLE", "IFACE", "ADDRESSES", "PROCESSES / XDP")
	for _, n := range s.Namespaces {
		if !n.Exists {
			fmt.Fprintf(w, "%-10s %-9s MISSING\n", n.Name, n.Role)
			continue
		}
		var ps []string
		for p, pid := range n.Processes {
			if pid == 0 {
				ps = append(ps, p+"(DEAD)")
			} else {
				ps = append(ps, fmt.Sprintf("%s(pid %d)", p, pid))
			}
		}
		sort.Strings(ps)
		first := true
		for _, f := range n.Interfaces {
			if f.Name == "lo" && len(f.Addrs) == 0 {
				continue
			}
			extra := ""
			if f.XDP != 0 {
				extra = fmt.Sprintf("xdp prog %d", f.XDP)
			}
			name, role := "", ""
			if first {
				name, role = n.Name, string(n.Role)
				extra = strings.TrimSpace(strings.Join(ps, " ") + " " + extra)
				first = false
			}
			fmt.Fprintf(w, "%-10s %-9s %-8s %-36s %s\n", name, role, f.Name, strings.Join(f.Addrs, " "), extra)
		}
		if first { // only lo (the Mini-CDN's namespace)
			fmt.Fprintf(w, "%-10s %-9s %-8s %-36s %s\n", n.Name, n.Role, "lo", "127.0.0.0/8", strings.Join(ps, " "))
		}
	}
	if len(s.VIPs) > 0 {
		fmt.Fprintf(w, "\n%-6s %-26s %-5s %s\n", "VIP", "ADDRESS", "PROTO", "BACKENDS")
	}
	for _, v := range s.VIPs {
		var bes []string
		for _, b := range v.Backends {
			bes = append(bes, b.Host+"="+b.Address)
		}
		fmt.Fprintf(w, "%-6s %-26s %-5s %s\n", v.Name, netip.AddrPortFrom(netip.MustParseAddr(v.Address), v.Port), v.Protocol, strings.Join(bes, " "))
	}
	if s.BGP != nil {
		s.BGP.print(w)
	}
	if s.CDN != nil {
		s.CDN.print(w)
	}
	if s.Store != nil {
		fmt.Fprintf(w, "\nstore: %d etcd members, balancers run with --store %s\n", len(s.Store.Members), s.Store.URL)
	}
	s.printSockets(w)
	s.printObserve(w)
	for _, n := range s.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// printSockets says where the balancer daemons' control sockets are: `switchyard vip|backend`
// find them there when /run/switchyard has none (--lab PREFIX picks a lab, --socket a daemon).
func (s *Status) printSockets(w io.Writer) {
	if len(s.Sockets) == 0 {
		return
	}
	var ns []string
	for n := range s.Sockets {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	fmt.Fprintf(w, "\ndaemon sockets (`switchyard vip list --lab %s` uses them; --socket PATH picks one):\n", s.Prefix)
	for _, n := range ns {
		fmt.Fprintf(w, "  %-10s %s\n", n, s.Sockets[n])
	}
}
