package topo

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func TestPlanAddressesAndNames(t *testing.T) {
	vip := netip.MustParseAddr("198.18.100.1")
	top, err := Plan(Spec{Prefix: "sy", Clients: 2, Balancers: 2, Backends: 3, L7: 2, DNS: true, Edge: true,
		BackendVIPs: []netip.Addr{vip}, VIPRoutes: []netip.Prefix{netip.MustParsePrefix("198.18.100.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	if top.RouterNS != "sy-rt" || len(top.Segments) != 4 {
		t.Fatalf("router %s, %d segments", top.RouterNS, len(top.Segments))
	}
	be2, ok := top.Node("be2")
	if !ok || be2.NS != "sy-be2" || be2.Addr4.String() != "198.18.3.12" || be2.Addr6.String() != "fd00:5e:3::12" || be2.Loopback[0] != vip {
		t.Errorf("be2 = %+v", be2)
	}
	if n, _ := top.Node("l7b"); n.Addr4.String() != "198.18.3.152" || n.Role != L7 {
		t.Errorf("l7b = %+v", n)
	}
	if n, _ := top.Node("sy-dns"); n.Addr4.String() != "198.18.4.53" {
		t.Errorf("dns = %+v", n)
	}
	if len(top.Routes) != 1 || len(top.Routes[0].Via) != 2 || top.Routes[0].Via[1].String() != "198.18.2.12" {
		t.Errorf("VIP route should be ECMP over both balancers: %+v", top.Routes)
	}
	if s := top.Segment("lb"); s.RouterMAC != "02:5e:00:00:02:01" || s.Router4.String() != "198.18.2.1" {
		t.Errorf("lb segment = %+v", s)
	}
	if got := len(top.Namespaces()); got != 1+2+2+3+2+2 {
		t.Errorf("%d namespaces", got)
	}
	for _, n := range top.Nodes {
		if len(n.Port) > 15 {
			t.Errorf("port name %q longer than IFNAMSIZ", n.Port)
		}
	}
}

func TestPlanRejectsBadSpecs(t *testing.T) {
	for _, c := range []struct {
		s    Spec
		want string
	}{
		{Spec{Prefix: "", Clients: 1, Balancers: 1, Backends: 1}, "prefix"},
		{Spec{Prefix: "much-too-long", Clients: 1, Balancers: 1, Backends: 1}, "prefix"},
		{Spec{Prefix: "a b", Clients: 1, Balancers: 1, Backends: 1}, "prefix"},
		{Spec{Prefix: "sy", Clients: 0, Balancers: 1, Backends: 1}, "at least one"},
		{Spec{Prefix: "sy", Clients: 1, Balancers: 1, Backends: 200}, "at most"},
	} {
		t.Run(fmt.Sprintf("prefix=%q clients=%d backends=%d", c.s.Prefix, c.s.Clients, c.s.Backends), func(t *testing.T) {
			if _, err := Plan(c.s); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: err %v, want one with %q", c.s, err, c.want)
			}
		})
	}
}
