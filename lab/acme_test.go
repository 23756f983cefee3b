package lab

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/libdns/libdns"
	mdns "github.com/miekg/dns"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/edge"
	"github.com/switchyard/switchyard/internal/pebble"
	"github.com/switchyard/switchyard/internal/rfc2136"
	"github.com/switchyard/switchyard/l7"
	"github.com/switchyard/switchyard/lab/topo"
)

// TestACMEConfigs: with the lab's ACME CA, the edge's configuration (as `lab up` writes it)
// parses with an HTTPS listener ordering static.lab.test by dns-01 from Pebble through the DNS
// stop, the L7 tier's with an HTTPS and HTTP/3 listener ordering app.lab.test the same way (its
// connection IDs naming the instance), and the lab's zone, served by switchyard's DNS server on
// loopback, takes the stops' signed updates of _acme-challenge.static and .app and refuses the
// same key anywhere else.
func TestACMEConfigs(t *testing.T) {
	l, err := Plan(Spec{Prefix: "ac", Clients: 1, Balancers: 1, Backends: 2, L7: 1, DNS: true, Edge: true})
	if err != nil {
		t.Fatal(err)
	}
	dnsNode, _ := l.Topo.Node("dns")
	srv, err := pebble.Prepare("/nonexistent/pebble", t.TempDir(), pebble.Options{Listen: "198.18.4.53:14000", Mgmt: "198.18.4.53:15000", DNSServer: "198.18.4.53:53"})
	if err != nil {
		t.Fatal(err)
	}
	a := &acmeSetup{server: srv, dns: netip.AddrPortFrom(dnsNode.Addr4, 53), tsigSecret: "c3dpdGNoeWFyZC1sYWItdGVzdC1rZXktMzItYnl0ZXMh", dir: t.TempDir()}
	ec, err := edge.ParseConfig([]byte(edgeConfig(L7VIP, a)))
	if err != nil {
		t.Fatalf("the lab's edge configuration does not parse: %v\n%s", err, edgeConfig(L7VIP, a))
	}
	if ec.TLS == nil || ec.TLS.ACME == nil || ec.TLS.ACME.DNS01 == nil || ec.TLS.ACME.DNS01.Server != "198.18.4.53:53" ||
		ec.TLS.ACME.Directory != "https://198.18.4.53:14000/dir" || strings.Join(ec.TLS.ACME.Domains, ",") != StaticName {
		t.Fatalf("edge tls: %+v", ec.TLS)
	}

	lc, err := l7.ParseConfig([]byte(l7Config(l.Topo.ByRole(topo.Backend), a, 2)))
	if err != nil {
		t.Fatalf("the lab's L7 configuration does not parse: %v\n%s", err, l7Config(l.Topo.ByRole(topo.Backend), a, 2))
	}
	if len(lc.Listeners) != 2 || !lc.Listeners[1].HTTP3 || lc.Listeners[1].QUICLB == nil || lc.Listeners[1].QUICLB.ServerID != 2 ||
		lc.Listeners[1].TLS.ACME == nil || strings.Join(lc.Listeners[1].TLS.ACME.Domains, ",") != AppName || lc.Listeners[1].TLS.ACME.DNS01 == nil {
		t.Fatalf("L7 listeners: %+v", lc.Listeners)
	}

	cfg, err := config.Parse([]byte(dnsConfig(l, dnsNode, a)))
	if err != nil {
		t.Fatalf("the lab's DNS configuration does not parse: %v\n%s", err, dnsConfig(l, dnsNode, a))
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Zones[0].Names = nil // their checks probe lab addresses; nothing is sent from here
	cfg.Zones[0].Update.Journal = t.TempDir() + "/journal"
	dns, err := sydns.NewServer(cfg, sydns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := dns.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer dns.Close()
	p := &rfc2136.Provider{Server: dns.Addr().String(), KeyName: acmeKeyName, Secret: a.tsigSecret}
	rec := []libdns.Record{libdns.TXT{Name: "_acme-challenge.static", TTL: time.Minute, Text: "token"}}
	if _, err := p.AppendRecords(ctx, Zone, rec); err != nil {
		t.Fatalf("the lab zone refuses the edge's challenge record: %v", err)
	}
	m, _, err := sydns.Query(ctx, dns.Addr().String(), "_acme-challenge."+StaticName+".", mdns.TypeTXT, sydns.QueryOptions{})
	if err != nil || len(m.Answer) != 1 {
		t.Fatalf("TXT _acme-challenge.%s after the update: %v %v", StaticName, m, err)
	}
	app := []libdns.Record{libdns.TXT{Name: "_acme-challenge.app", TTL: time.Minute, Text: "token"}}
	if _, err := p.AppendRecords(ctx, Zone, app); err != nil {
		t.Fatalf("the lab zone refuses the L7 tier's challenge record: %v", err)
	}
	other := []libdns.Record{libdns.TXT{Name: "_acme-challenge.www", TTL: time.Minute, Text: "token"}}
	if _, err := p.AppendRecords(ctx, Zone, other); err == nil {
		t.Fatal("the acme key may write _acme-challenge.www: the allow-list must hold the stops' names alone")
	}
}
