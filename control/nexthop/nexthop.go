// Package nexthop finds the MAC addresses the forwarder writes into encapsulated frames: the
// interface's own and the next hop's (the default route's gateway, or a configured router),
// through netlink, and follows route and neighbour changes.
package nexthop

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Result is what the forwarder needs to build frames.
type Result struct {
	IfMAC      net.HardwareAddr
	NextHopMAC net.HardwareAddr
	// Gateway is the next hop's IP address.
	Gateway netip.Addr
	// MTU is the interface MTU.
	MTU int
}

// Equal compares two results.
func (r Result) Equal(o Result) bool {
	return r.IfMAC.String() == o.IfMAC.String() && r.NextHopMAC.String() == o.NextHopMAC.String() &&
		r.Gateway == o.Gateway && r.MTU == o.MTU
}

// Resolve looks the next hop up once. When nextHop is invalid, the gateway of the default route
// through iface is used. A neighbour not yet resolved is asked for (the kernel sends ARP or ND)
// and waited for up to wait.
func Resolve(iface string, nextHop netip.Addr, wait time.Duration) (Result, error) {
	l, err := netlink.LinkByName(iface)
	if err != nil {
		return Result{}, fmt.Errorf("find interface %q: %w (list interfaces with `ip link`)", iface, err)
	}
	a := l.Attrs()
	res := Result{IfMAC: a.HardwareAddr, MTU: a.MTU}
	if len(res.IfMAC) != 6 {
		return res, fmt.Errorf("interface %s has no Ethernet address: the forwarder needs an Ethernet interface", iface)
	}
	gw := nextHop
	if !gw.IsValid() {
		if gw, err = defaultGateway(a.Index); err != nil {
			return res, fmt.Errorf("find next hop on %s: %w", iface, err)
		}
	}
	res.Gateway = gw
	deadline := time.Now().Add(wait)
	asked := false
	for {
		mac, err := neighbour(a.Index, gw)
		if err != nil {
			return res, err
		}
		if mac != nil {
			res.NextHopMAC = mac
			return res, nil
		}
		if !asked {
			solicit(a.Index, gw)
			asked = true
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("next hop %s on %s: no MAC address (neighbour unresolved): check that %s is up and reachable (`ip neigh show dev %s`), or set next_hop", gw, iface, gw, iface)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// defaultGateway finds the gateway of a default route through the link (IPv4 first).
func defaultGateway(linkIndex int) (netip.Addr, error) {
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteListFiltered(fam, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("list routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			if r.Gw != nil && r.LinkIndex == linkIndex {
				if a, ok := netip.AddrFromSlice(r.Gw); ok {
					return a.Unmap(), nil
				}
			}
			for _, nh := range r.MultiPath {
				if nh.Gw != nil && nh.LinkIndex == linkIndex {
					if a, ok := netip.AddrFromSlice(nh.Gw); ok {
						return a.Unmap(), nil
					}
				}
			}
		}
	}
	return netip.Addr{}, errors.New("no default route with a gateway through this interface: add one or set next_hop")
}

// neighbour returns the neighbour's MAC when the kernel has a usable entry.
func neighbour(linkIndex int, ip netip.Addr) (net.HardwareAddr, error) {
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	ns, err := netlink.NeighList(linkIndex, fam)
	if err != nil {
		return nil, fmt.Errorf("list neighbours: %w", err)
	}
	for _, n := range ns {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok || a.Unmap() != ip {
			continue
		}
		if n.State&(netlink.NUD_INCOMPLETE|netlink.NUD_FAILED) != 0 || len(n.HardwareAddr) != 6 {
			return nil, nil
		}
		return n.HardwareAddr, nil
	}
	return nil, nil
}

// solicit asks the kernel to resolve a neighbour (NTF_USE: the kernel sends ARP/ND as if a
// packet were waiting), without sending any data to it.
func solicit(linkIndex int, ip netip.Addr) {
	fam := netlink.FAMILY_V4
	if ip.Is6() {
		fam = netlink.FAMILY_V6
	}
	_ = netlink.NeighSet(&netlink.Neigh{LinkIndex: linkIndex, Family: fam, IP: ip.AsSlice(), State: netlink.NUD_NONE, Flags: netlink.NTF_USE})
}

// Follow calls onChange with every new result while ctx lives: at start, on route and neighbour
// changes, and every recheck (which also retries an unresolved next hop). Errors go to onError.
func Follow(ctx context.Context, iface string, nextHop netip.Addr, recheck time.Duration, onChange func(Result), onError func(error)) {
	neighCh := make(chan netlink.NeighUpdate, 64)
	routeCh := make(chan netlink.RouteUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.NeighSubscribe(neighCh, done); err != nil {
		onError(fmt.Errorf("subscribe to neighbour changes: %w (falling back to polling)", err))
	}
	if err := netlink.RouteSubscribe(routeCh, done); err != nil {
		onError(fmt.Errorf("subscribe to route changes: %w (falling back to polling)", err))
	}
	t := time.NewTicker(recheck)
	defer t.Stop()
	var last Result
	var lastErr string
	check := func() {
		r, err := Resolve(iface, nextHop, 0)
		if err != nil {
			if err.Error() != lastErr {
				onError(err)
				lastErr = err.Error()
			}
			return
		}
		lastErr = ""
		if !r.Equal(last) {
			last = r
			onChange(r)
		}
	}
	check()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-neighCh:
			if !ok {
				neighCh = nil // subscription ended: polling only
			}
		case _, ok := <-routeCh:
			if !ok {
				routeCh = nil
			}
		case <-t.C:
		}
		// Changes come in bursts (an ARP refresh touches several entries): settle first.
		settle := time.NewTimer(20 * time.Millisecond)
	drain:
		for {
			select {
			case _, ok := <-neighCh:
				if !ok {
					neighCh = nil
				}
			case _, ok := <-routeCh:
				if !ok {
					routeCh = nil
				}
			case <-settle.C:
				break drain
			case <-ctx.Done():
				settle.Stop()
				return
			}
		}
		check()
	}
}
