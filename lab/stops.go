package lab

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchyard/switchyard/lab/topo"
)

// The lab's DNS zone, split as the content-delivery lesson's "Static Content Hosting" splits
// it: www.lab.test is the app's name (short TTL: it fails over, a failover policy name from the
// L7 VIP to the web VIP), static.lab.test the content name (long TTL) answering the edge cache;
// app.lab.test is the L7 VIP (its HTTPS and HTTP/3 name).
const (
	Zone       = "lab.test."
	WWWName    = "www.lab.test"
	StaticName = "static.lab.test"
	AppName    = "app.lab.test"
	// WWWTTL and StaticTTL are the two ends of the first lesson's TTL table (30 s and 900 s).
	WWWTTL    = 30
	StaticTTL = 900
)

// The stops' configurations are written as YAML text: each stop owns its configuration types,
// and the lab only fills in the lab's addresses in the shapes their docs give.

// dnsConfig serves lab.test. on port 53 of the DNS host; with a (the lab's ACME CA) the zone
// takes RFC 2136 updates of the edge's and the L7 tier's _acme-challenge TXT records signed with
// the acme key.
func dnsConfig(l *Lab, dns topo.Node, a *acmeSetup) string {
	var recs []string
	recs = append(recs, `"@ NS ns1"`, fmt.Sprintf(`"ns1 A %s"`, dns.Addr4))
	if e, ok := l.Topo.Node("edge"); ok {
		recs = append(recs, fmt.Sprintf(`"static %d A %s"`, StaticTTL, e.Addr4), fmt.Sprintf(`"static %d AAAA %s"`, StaticTTL, e.Addr6))
	}
	recs = append(recs, fmt.Sprintf(`"app A %s"`, L7VIP), fmt.Sprintf(`"web A %s"`, WebVIP4), fmt.Sprintf(`"web AAAA %s"`, WebVIP6))
	keys, update := "", ""
	if a != nil {
		keys = fmt.Sprintf("tsig_keys: [{name: %s, secret: %q}]\n", acmeKeyName, a.tsigSecret)
		rel := func(name string) string {
			return "_acme-challenge." + strings.TrimSuffix(name, "."+strings.TrimSuffix(Zone, "."))
		}
		update = fmt.Sprintf("    update: {allow: [{key: %s, names: [%s, %s], types: [TXT]}]}\n", acmeKeyName, rel(StaticName), rel(AppName))
	}
	return fmt.Sprintf(`listen: 0.0.0.0:53
%szones:
  - origin: %s
    ttl: 30
    soa: {ns: ns1, mbox: hostmaster, serial: 1, minimum: 30}
    records: [%s]
    names: [%s]
%s`, keys, Zone, strings.Join(recs, ", "), wwwName(l), update)
}

// wwwName is the app's name: the L7 VIP while its check passes, else the web VIP (XDP straight
// to the app servers); both while nothing is known yet (answer-all), so it answers from the start.
func wwwName(l *Lab) string {
	check := func(a netip.Addr) string {
		return fmt.Sprintf(`check: {type: http, target: "%s:80", path: /health, expect_status: 200, interval: 1s, timeout: 500ms, rise: 1, fall: 2}`, a)
	}
	web := fmt.Sprintf(`{name: web, addresses: [%s], %s}`, WebVIP4, check(WebVIP4))
	chain, sites := "[web]", web
	if len(l.Topo.ByRole(topo.L7)) > 0 {
		chain, sites = "[l7, web]", fmt.Sprintf(`{name: l7, addresses: [%s], %s}, %s`, L7VIP, check(L7VIP), web)
	}
	return fmt.Sprintf(`{name: www, ttl: %d, policy: failover, all_down: answer-all, chain: %s, sites: [%s]}`, WWWTTL, chain, sites)
}

// edgeConfig caches in front of the L7 VIP; with a (the lab's ACME CA) it also serves HTTPS
// (HTTP/1.1 and HTTP/2 by ALPN) on :443 with a certificate for static.lab.test obtained by dns-01.
func edgeConfig(origin netip.Addr, a *acmeSetup) string {
	tls := ""
	if a != nil {
		tls = fmt.Sprintf("tls:\n  listen: 0.0.0.0:%d\n  acme: %s\n", tlsPort, a.acmeYAML(StaticName, "edge-acme"))
	}
	return fmt.Sprintf(`listen: 0.0.0.0:80
%sorigin: http://%s:80
admin:
  listen: 127.0.0.1:9091
  token: lab-only-token
memory:
  max_bytes: 64MiB
`, tls, origin)
}

// l7Config is the L7 tier's configuration: /tracking reads go to the reads pool (every backend
// but the last), /event writes to the writes pool (the last backend), /asset to the static pool,
// everything else to all backends. It listens on every address (the L7 VIP on lo for the
// clients, the host's own address for the L4 daemon's health checks). With a (the lab's ACME
// CA) it also serves app.lab.test over TLS (HTTP/1.1 and HTTP/2) and HTTP/3 on :443, with a
// certificate ordered by dns-01 into a storage every L7 instance shares (the first orders, the
// others wait on its lock and load the result), and HTTP/3 connection IDs that carry serverID,
// the instance's server ID at the balancer's QUIC VIP (lab.go).
func l7Config(bes []topo.Node, a *acmeSetup, serverID uint32) string {
	addrs := func(ns []topo.Node) string {
		var b []string
		for _, n := range ns {
			b = append(b, fmt.Sprintf("{address: %s:80}", n.Addr4))
		}
		return strings.Join(b, ", ")
	}
	reads, writes := bes, bes
	if len(bes) > 1 {
		reads, writes = bes[:len(bes)-1], bes[len(bes)-1:]
	}
	tls := ""
	if a != nil {
		tls = fmt.Sprintf("  - {address: 0.0.0.0:%d, http3: true, quic_lb: {server_id: %d}, tls: {acme: %s}}\n", tlsPort, serverID, a.acmeYAML(AppName, "l7-acme"))
	}
	health := "health: {path: /health, interval: 1s, timeout: 500ms, rise: 2, fall: 2, expect_status: 200}"
	return fmt.Sprintf(`listeners:
  - address: 0.0.0.0:80
%[5]sadmin: {address: 127.0.0.1:9901, token: lab-only-token}
routes:
  - name: tracking
    match: {path: {prefix: /tracking}, methods: [GET, HEAD]}
    pool: reads
  - name: event
    match: {path: {exact: /event}, methods: [POST]}
    pool: writes
  - name: asset
    match: {path: {prefix: /asset}}
    pool: static
  - name: all
    match: {path: {prefix: /}}
    pool: app
pools:
  - {name: reads, balance: least_request, backends: [%[1]s], %[4]s}
  - {name: writes, balance: round_robin, backends: [%[2]s], %[4]s}
  - {name: static, balance: round_robin, backends: [%[3]s], %[4]s}
  - {name: app, balance: least_request, backends: [%[3]s], %[4]s}
`, addrs(reads), addrs(writes), addrs(bes), health, tls)
}

// writeConfig writes a stop's configuration into the lab's state directory.
func writeConfig(prefix, name, body string) (string, error) {
	if err := os.MkdirAll(StateDir(prefix), 0o700); err != nil {
		return "", fmt.Errorf("create lab state directory: %w", err)
	}
	p := filepath.Join(StateDir(prefix), name+".yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		return "", fmt.Errorf("write %s config: %w", name, err)
	}
	return p, nil
}

// startStops starts the other stops whose commands exist: the DNS server, the lab's ACME CA,
// the L7 proxies on the L7 hosts (app servers otherwise) and the edge cache.
func startStops(o UpOptions, l *Lab, st *State, start func(name, ns string, argv ...string) error) error {
	dnsNode, hasDNS := l.Topo.Node("dns")
	edgeNode, hasEdge := l.Topo.Node("edge")
	// The lab's ACME CA, when DNS and the edge run: Pebble, answered through the DNS stop (acme.go).
	var a *acmeSetup
	if hasDNS && hasEdge && o.Stops["dns"] && o.Stops["edge"] {
		var err error
		if a, err = prepareACME(st, dnsNode); err != nil {
			st.Notes = append(st.Notes, fmt.Sprintf("no https on the edge: %v", err))
			a = nil
		}
	}
	if hasDNS { // before the edge: its certificate order goes through the DNS stop
		if o.Stops["dns"] {
			p, err := writeConfig(st.Prefix, dnsNode.Name, dnsConfig(l, dnsNode, a))
			if err != nil {
				return err
			}
			if err := start(dnsNode.Name, dnsNode.NS, o.Exe, "dns", "run", "--config", p, "--metrics", dnsMetrics); err != nil {
				return err
			}
			st.Running[dnsNode.Name] = "dns"
		} else {
			st.Notes = append(st.Notes, "dns namespace is empty: this binary has no `switchyard dns run`")
		}
	}
	if a != nil {
		if err := startPebble(st, a, dnsNode); err != nil {
			return err
		}
	}
	// The L7 proxies after Pebble: their certificate order goes to it.
	bes := l.Topo.ByRole(topo.Backend)
	for i, n := range l.Topo.ByRole(topo.L7) {
		if !o.Stops["l7"] {
			// An app server answers for the L7 VIP, so that the path through it works.
			if err := start(n.Name, n.NS, appArgv(o.Exe, n)...); err != nil {
				return err
			}
			st.Running[n.Name] = "app"
			continue
		}
		p, err := writeConfig(st.Prefix, n.Name, l7Config(bes, a, l.VIP("l7quic").ServerID(i)))
		if err != nil {
			return err
		}
		if err := start(n.Name, n.NS, o.Exe, "l7", "run", "--config", p); err != nil {
			return err
		}
		st.Running[n.Name] = "l7"
	}
	if len(l.Topo.ByRole(topo.L7)) > 0 && !o.Stops["l7"] {
		st.Notes = append(st.Notes, "l7 namespaces run app servers: this binary has no `switchyard l7 run`")
	}
	if hasEdge {
		origin := L7VIP
		if len(l.Topo.ByRole(topo.L7)) == 0 {
			origin = WebVIP4
		}
		if o.Stops["edge"] {
			p, err := writeConfig(st.Prefix, edgeNode.Name, edgeConfig(origin, a))
			if err != nil {
				return err
			}
			if err := start(edgeNode.Name, edgeNode.NS, o.Exe, "edge", "run", "--config", p); err != nil {
				return err
			}
			st.Running[edgeNode.Name] = "edge"
		} else {
			st.Notes = append(st.Notes, "edge namespace is empty: this binary has no `switchyard edge run`")
		}
	}
	return nil
}
