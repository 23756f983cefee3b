package lab

import (
	"context"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/dns/config"
)

// TestZoneSplitsAppAndContent: the lab's zone (as `lab up` writes it) answers www.lab.test with
// the app (the L7 VIP, TTL 30, a failover name) and static.lab.test with the edge (TTL 900),
// served by switchyard's DNS server on loopback.
func TestZoneSplitsAppAndContent(t *testing.T) {
	l, err := Plan(Spec{Prefix: "zt", Clients: 1, Balancers: 1, Backends: 2, L7: 1, DNS: true, Edge: true})
	if err != nil {
		t.Fatal(err)
	}
	dnsNode, _ := l.Topo.Node("dns")
	edgeNode, _ := l.Topo.Node("edge")
	cfg, err := config.Parse([]byte(dnsConfig(l, dnsNode, nil)))
	if err != nil {
		t.Fatalf("the lab's DNS configuration does not parse: %v\n%s", err, dnsConfig(l, dnsNode, nil))
	}
	cfg.Listen = "127.0.0.1:0"
	// The checks probe lab addresses, which only exist in the lab's namespaces: nothing is sent
	// from here. Without its checks the failover name answers its first site (the L7 VIP).
	for i := range cfg.Zones[0].Names {
		n := &cfg.Zones[0].Names[i]
		if n.Name != WWWName+"." || n.Policy != "failover" || len(n.Sites) != 2 || n.Sites[0].Check == nil {
			t.Fatalf("www is not a checked failover name over two sites: %+v", n)
		}
		for j := range n.Sites {
			n.Sites[j].Check = nil
		}
	}
	srv, err := sydns.NewServer(cfg, sydns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, c := range []struct {
		name string
		want netip.Addr
		ttl  uint32
	}{{WWWName, L7VIP, WWWTTL}, {StaticName, edgeNode.Addr4, StaticTTL}} {
		m, _, err := sydns.Query(ctx, srv.Addr().String(), c.name, mdns.TypeA, sydns.QueryOptions{})
		if err != nil {
			t.Fatalf("query %s: %v", c.name, err)
		}
		found := false
		if c.name == WWWName && len(m.Answer) != 1 {
			t.Errorf("www with both sites up answers %v, want the primary alone", m.Answer)
		}
		for _, rr := range m.Answer {
			if a, ok := rr.(*mdns.A); ok {
				got, _ := netip.AddrFromSlice(a.A.To4())
				found = found || got == c.want
				if rr.Header().Ttl != c.ttl {
					t.Errorf("%s: TTL %d, want %d", c.name, rr.Header().Ttl, c.ttl)
				}
			}
		}
		if !found {
			t.Errorf("%s answers %v, want %s among them", c.name, m.Answer, c.want)
		}
	}
}
