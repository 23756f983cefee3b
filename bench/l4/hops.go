package main

import (
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// routedTable is the router's policy-routing table of the routed path (and routedPref its rule's
// priority): the VIP's second pass, from the balancer's segment, goes to the backends.
const (
	routedTable = "100"
	routedPref  = "100"
)

// setupRouted points the VIP at the backends through the balancer host acting as a plain IP
// router (no balancer program, no NAT): the router sends the VIP to the balancer, whose kernel
// forwards it back out of the same interface to its gateway, and the router, seeing it come in
// from the balancer's segment, routes it to the backends (ECMP on the 5-tuple, as direct). Each
// request packet crosses the same hops as on the XDP path (two router crossings, the balancer's
// veth in and out); the replies go straight back as on every path but HAProxy's and nft's. Its
// ratio to direct is what the lab's second hop costs with no balancer at all, and XDP against it
// is what the balancer costs on top of that hop.
func (b *bench) setupRouted() error {
	rt := b.l.Topo.RouterNS
	vip := netip.PrefixFrom(lab.WebVIP4, 32).String()
	// The balancer must forward the VIP, not deliver it: HAProxy's address comes off its lo for
	// these runs (teardownRouted puts it back).
	nsexec(b.lb.NS, "ip", "addr", "del", vip, "dev", "lo")
	if err := b.policyRoute(); err != nil {
		return err
	}
	return topo.SetRoute(rt, netip.PrefixFrom(lab.WebVIP4, 32), []netip.Addr{b.lb.Addr4})
}

// policyRoute makes the router send the VIP that comes back from the balancer's segment on to
// the backends (ECMP on the 5-tuple, as direct): a policy rule on the ingress bridge and a table
// of its own.
func (b *bench) policyRoute() error {
	rt := b.l.Topo.RouterNS
	vip := netip.PrefixFrom(lab.WebVIP4, 32).String()
	seg := b.l.Topo.Segment(b.lb.Segment)
	steps := [][]string{
		{"ip", "route", "replace", vip, "table", routedTable, "nexthop", "via", b.bes[0].Addr4.String(), "nexthop", "via", b.bes[1].Addr4.String()},
		{"ip", "rule", "add", "pref", routedPref, "iif", seg.Bridge, "to", vip, "lookup", routedTable},
	}
	for _, argv := range steps {
		if err := nsexec(rt, argv...); err != nil {
			return fmt.Errorf("policy route of the VIP's second pass: %w", err)
		}
	}
	return nil
}

// teardownRouted removes the routed path's policy rule and table, and gives the balancer its
// VIP on lo back.
func (b *bench) teardownRouted() {
	rt := b.l.Topo.RouterNS
	nsexec(rt, "ip", "rule", "del", "pref", routedPref)
	nsexec(rt, "ip", "route", "flush", "table", routedTable)
	topo.AddLoopback(b.lb.NS, lab.WebVIP4)
}

// setupFloor is the XDP path's hops with the cheapest XDP balancer there can be: xdp_macswap
// (bench.c: swap the MACs, XDP_TX) on the balancer's interface, xdp_pass on the router port for
// its frames as for the forwarder's, and the router's policy route of the routed path sending the
// reflected VIP packets on to the backends. No lookup, no encapsulation, no decapsulation at the
// backend: its ratio to direct is what the lab's second hop costs an XDP balancer before it does
// any work, and XDP against it is the forwarder's own cost (program, IPIP, decap).
func (b *bench) setupFloor() error {
	if err := b.policyRoute(); err != nil {
		return err
	}
	// The program reflects ARP too: the router keeps the balancer's MAC for these runs.
	mac, err := topo.MAC(b.lb.NS, b.lb.Iface)
	if err != nil {
		return err
	}
	seg := b.l.Topo.Segment(b.lb.Segment)
	if err := nsexec(b.l.Topo.RouterNS, "ip", "neigh", "replace", b.lb.Addr4.String(), "lladdr", mac.String(), "dev", seg.Bridge, "nud", "permanent"); err != nil {
		return fmt.Errorf("floor path: %w", err)
	}
	pass, err := namednetns.In(b.l.Topo.RouterNS, func() (link.Link, error) { return loader.AttachPass(b.lb.Port, loader.Native, "") })
	if err != nil {
		return fmt.Errorf("xdp_pass on router port %s: %w", b.lb.Port, err)
	}
	b.pass = pass
	// Only the one program: the bench object also holds the forwarder's wrappers and maps
	// (it is built from lb.c), which the floor has no use for.
	spec, err := bpfobj.LoadBench()
	if err != nil {
		return fmt.Errorf("load bench spec: %w", err)
	}
	ps, ok := spec.Programs["xdp_macswap"]
	if !ok {
		return fmt.Errorf("load xdp_macswap: not in the bench object (bpf/bench.c)")
	}
	prog, err := ebpf.NewProgram(ps)
	if err != nil {
		return fmt.Errorf("load xdp_macswap: %w", err)
	}
	defer prog.Close()
	l, err := namednetns.In(b.lb.NS, func() (link.Link, error) {
		l, _, err := loader.AttachOrUpdate(prog, b.lb.Iface, loader.Native, "")
		return l, err
	})
	if err != nil {
		return fmt.Errorf("xdp_macswap on %s: %w", b.lb.Iface, err)
	}
	b.floor = l
	return topo.SetRoute(b.l.Topo.RouterNS, netip.PrefixFrom(lab.WebVIP4, 32), []netip.Addr{b.lb.Addr4})
}

func (b *bench) teardownFloor() {
	for _, l := range []*link.Link{&b.floor, &b.pass} {
		if *l != nil {
			(*l).Close()
			*l = nil
		}
	}
	seg := b.l.Topo.Segment(b.lb.Segment)
	nsexec(b.l.Topo.RouterNS, "ip", "neigh", "del", b.lb.Addr4.String(), "dev", seg.Bridge)
	b.teardownRouted()
}
