package main

import (
	"fmt"
	"net/netip"

	"github.com/switchyard/switchyard/testenv/lab"
	"github.com/switchyard/switchyard/testenv/topo"
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
	seg := b.l.Topo.Segment(b.lb.Segment)
	steps := [][]string{
		{"ip", "route", "replace", vip, "table", routedTable, "nexthop", "via", b.bes[0].Addr4.String(), "nexthop", "via", b.bes[1].Addr4.String()},
		{"ip", "rule", "add", "pref", routedPref, "iif", seg.Bridge, "to", vip, "lookup", routedTable},
	}
	for _, argv := range steps {
		if err := nsexec(rt, argv...); err != nil {
			return fmt.Errorf("routed path: %w", err)
		}
	}
	return topo.SetRoute(rt, netip.PrefixFrom(lab.WebVIP4, 32), []netip.Addr{b.lb.Addr4})
}

// teardownRouted removes the routed path's policy rule and table, and gives the balancer its
// VIP on lo back.
func (b *bench) teardownRouted() {
	rt := b.l.Topo.RouterNS
	nsexec(rt, "ip", "rule", "del", "pref", routedPref)
	nsexec(rt, "ip", "route", "flush", "table", routedTable)
	topo.AddLoopback(b.lb.NS, lab.WebVIP4)
}
