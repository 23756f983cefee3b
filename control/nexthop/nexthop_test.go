package nexthop

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/switchyard/switchyard/internal/testutil"
)

// inFreshNetns runs f on a thread moved into a new network namespace holding a veth pair
// nh-a (198.18.0.2/24, default route via 198.18.0.1) whose peer nh-b (198.18.0.1/24) sits in a
// second namespace, the router's.
func inFreshNetns(t *testing.T, f func(peer netlink.Link)) {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireKernel(t, testutil.Netns)
	testutil.Do(t, netns.None(), func() error { // the thread goes back to the host namespace after f
		peerNS, err := netns.New() // the router's namespace
		if err != nil {
			return err
		}
		defer peerNS.Close()
		ns, err := netns.New() // ours; the thread now runs in it
		if err != nil {
			return err
		}
		defer ns.Close()
		ph, err := netlink.NewHandleAt(peerNS)
		if err != nil {
			return err
		}
		defer ph.Close()
		la := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "nh-a"}, PeerName: "nh-b"}
		if err := netlink.LinkAdd(la); err != nil {
			return err
		}
		a, _ := netlink.LinkByName("nh-a")
		b, _ := netlink.LinkByName("nh-b")
		if err := netlink.LinkSetNsFd(b, int(peerNS)); err != nil {
			return err
		}
		b, _ = ph.LinkByName("nh-b")
		for _, x := range []struct {
			h    *netlink.Handle
			l    netlink.Link
			addr string
		}{{nil, a, "198.18.0.2/24"}, {ph, b, "198.18.0.1/24"}} {
			h := x.h
			if h == nil {
				h = &netlink.Handle{}
			}
			ad, _ := netlink.ParseAddr(x.addr)
			if err := h.AddrAdd(x.l, ad); err != nil {
				return err
			}
			if err := h.LinkSetUp(x.l); err != nil {
				return err
			}
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: a.Attrs().Index, Gw: net.ParseIP("198.18.0.1")}); err != nil {
			return err
		}
		peerHandle, testNS = ph, ns
		f(b)
		return nil
	})
}

func TestResolveDefaultGateway(t *testing.T) {
	inFreshNetns(t, func(peer netlink.Link) {
		r, err := Resolve("nh-a", netip.Addr{}, 3*time.Second)
		if err != nil {
			t.Error(err)
			return
		}
		if r.Gateway != netip.MustParseAddr("198.18.0.1") {
			t.Errorf("gateway %s", r.Gateway)
		}
		if r.NextHopMAC.String() != peer.Attrs().HardwareAddr.String() {
			t.Errorf("next hop mac %s, the peer has %s", r.NextHopMAC, peer.Attrs().HardwareAddr)
		}
		if r.MTU != 1500 || len(r.IfMAC) != 6 {
			t.Errorf("result %+v", r)
		}
		// A configured next hop that never answers is an error that says what to check.
		_, err = Resolve("nh-a", netip.MustParseAddr("198.18.0.77"), 300*time.Millisecond)
		if err == nil {
			t.Error("unanswered next hop resolved")
		}
		if _, err := Resolve("nh-missing", netip.Addr{}, 0); err == nil {
			t.Error("missing interface accepted")
		}
		// Follow reports a change of the peer's MAC. Follow runs here, on the thread inside the
		// namespace; the change is made from another goroutine through namespace handles.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hA, err := netlink.NewHandleAt(testNS)
		if err != nil {
			t.Error(err)
			return
		}
		defer hA.Close()
		got := make(chan Result, 8)
		newMAC, _ := net.ParseMAC("02:00:00:00:00:42")
		ok := make(chan bool, 1)
		go func() {
			defer cancel()
			<-got
			if err := peerHandle.LinkSetHardwareAddr(peer, newMAC); err != nil {
				t.Error(err)
				return
			}
			// The kernel keeps the old neighbour entry until it is re-validated: flush it.
			la, _ := hA.LinkByName("nh-a")
			_ = hA.NeighDel(&netlink.Neigh{LinkIndex: la.Attrs().Index, IP: net.ParseIP("198.18.0.1")})
			for {
				select {
				case r := <-got:
					if r.NextHopMAC.String() == newMAC.String() {
						ok <- true
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
		Follow(ctx, "nh-a", netip.Addr{}, 200*time.Millisecond, func(r Result) { got <- r }, func(error) {})
		select {
		case <-ok:
		default:
			t.Error("Follow did not report the new next-hop MAC")
		}
	})
}

// peerHandle is a netlink handle in the router's namespace.
var peerHandle *netlink.Handle

// testNS is the test's own namespace.
var testNS netns.NsHandle
