package topo

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// RouteVia returns the next hops of the route to exactly dst in a namespace's main table (none
// when there is no such route): the router's ECMP route lists one per balancer.
func RouteVia(ns string, dst netip.Prefix) ([]netip.Addr, error) {
	h, err := handle(ns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	fam := netlink.FAMILY_V4
	if dst.Addr().Is6() {
		fam = netlink.FAMILY_V6
	}
	ipn := &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}
	rs, err := h.RouteListFiltered(fam, &netlink.Route{Dst: ipn}, netlink.RT_FILTER_DST)
	if err != nil {
		return nil, fmt.Errorf("list routes to %s in %s: %w", dst, ns, err)
	}
	var out []netip.Addr
	add := func(ip net.IP) {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	for _, r := range rs {
		if r.Dst == nil || r.Dst.String() != ipn.String() {
			continue
		}
		if r.Gw != nil {
			add(r.Gw)
		}
		for _, nh := range r.MultiPath {
			add(nh.Gw)
		}
	}
	return out, nil
}

// DelRoute removes the route to exactly dst from a namespace's main table.
func DelRoute(ns string, dst netip.Prefix) error {
	h, err := handle(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	r := &netlink.Route{Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}}
	if err := h.RouteDel(r); err != nil {
		return fmt.Errorf("delete route %s in %s: %w", dst, ns, err)
	}
	return nil
}
