package dns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// catalogPropPorts are the catalog member property tests' loopback ports.
var catalogPropPorts = &portRange{first: 47300, last: 47399}

// axfrOK reports whether the server at addr hands out zone by AXFR (with key, "" for none).
func axfrOK(addr, zone string, key *config.TSIGKey) bool {
	m := new(mdns.Msg)
	m.SetAxfr(zone)
	tr := &mdns.Transfer{DialTimeout: time.Second, ReadTimeout: 2 * time.Second}
	if key != nil {
		m.SetTsig(config.KeyName(key.Name), mdns.Fqdn(key.Algorithm), 300, time.Now().Unix())
		tr.TsigSecret = map[string]string{config.KeyName(key.Name): key.Secret}
	}
	ch, err := tr.In(m, addr)
	if err != nil {
		return false
	}
	n := 0
	for env := range ch {
		if env.Error != nil {
			return false
		}
		n += len(env.RR)
	}
	return n > 0
}

// TestCatalogGroupToKnot: a zone's catalog group reaches Knot in the produced catalog, and Knot
// (catalog-template: member, gold) configures that member by the gold template: here the only
// one that lets the test transfer the zone out of Knot.
func TestCatalogGroupToKnot(t *testing.T) {
	dir := t.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", catalogPropPorts.free(t))
	knotPort := catalogPropPorts.free(t)
	y := fmt.Sprintf("listen: %s\nstate_dir: %s\ncatalog: {zone: catalog.invalid., transfer: {allow: [127.0.0.1], notify: [\"127.0.0.1:%d\"]}}\nzones:\n", addr, dir, knotPort)
	for _, z := range []string{"a.test.", "b.test."} {
		y += fmt.Sprintf("  - {origin: %s, records: [\"@ NS ns1.%s\", \"ns1 A 192.0.2.1\"], transfer: {allow: [127.0.0.1]}", z, z)
		if z == "a.test." {
			y += ", catalog: {group: gold}"
		}
		y += "}\n"
	}
	os.WriteFile(filepath.Join(dir, "dns.yaml"), []byte(y), 0o600)
	updServer(t, dir)
	knot := runKnotInterpreting(t, knotPort, addr, `  - id: xfr-out
    address: 127.0.0.1
    action: transfer
`, `  - id: gold
    storage: "{dir}"
    master: sy
    acl: [from-sy, xfr-out]
    zonefile-sync: -1
`, "[member, gold]")
	for _, z := range []string{"a.test.", "b.test."} {
		testutil.Eventually(t, 20*time.Second, func() bool { return serves(knot.addr, z) },
			"knot does not serve the catalog member %s:\n%s", z, func() any { return knot.log() })
	}
	if !axfrOK(knot.addr, "a.test.", nil) {
		t.Errorf("knot refuses the AXFR of a.test.: the gold group's template was not applied\n%s", knot.log())
	}
	if axfrOK(knot.addr, "b.test.", nil) {
		t.Errorf("knot hands out b.test., a member without a group (its template allows no transfer)")
	}
}

// TestCatalogGroupFromKnot: Knot generates a catalog whose member x.test. is in group gold
// (catalog-group) and transfers it only with the gold key; switchyard's catalogs entry gives
// the gold group that key, so it serves x.test. beside y.test. (no group, no key).
func TestCatalogGroupFromKnot(t *testing.T) {
	const secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="
	addr := fmt.Sprintf("127.0.0.1:%d", catalogPropPorts.free(t))
	files := map[string]string{}
	for _, o := range []string{"x.test.", "y.test."} {
		files[o+"zone"] = fmt.Sprintf("$ORIGIN %s\n@ 300 SOA ns1 hostmaster 1 3600 600 604800 60\n@ 300 NS ns1\nns1 300 A 192.0.2.9\n", o)
	}
	conf := knotServer + fmt.Sprintf(`key:
  - id: gold-key
    algorithm: hmac-sha256
    secret: %s
remote:
  - id: sy
    address: %s
acl:
  - id: xfr
    address: 127.0.0.1
    action: transfer
  - id: xfr-gold
    address: 127.0.0.1
    key: gold-key
    action: transfer
template:
  - id: default
    storage: "%%[1]s"
    zonefile-sync: -1
zone:
  - domain: catalog.example.
    catalog-role: generate
    acl: xfr
  - domain: x.test.
    file: x.test.zone
    catalog-role: member
    catalog-zone: catalog.example.
    catalog-group: gold
    acl: xfr-gold
  - domain: y.test.
    file: y.test.zone
    catalog-role: member
    catalog-zone: catalog.example.
    acl: xfr
`, secret, strings.Replace(addr, ":", "@", 1))
	knot := runKnotOn(t, catalogPropPorts, conf, files)
	testutil.Eventually(t, 20*time.Second, func() bool { return serves(knot.addr, "x.test.") }, "knot did not start:\n%s", func() any { return knot.log() })
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "dns.yaml"), []byte(fmt.Sprintf(`listen: %s
state_dir: %s
tsig_keys: [{name: gold-key, algorithm: hmac-sha256, secret: "%s"}]
catalogs: [{zone: catalog.example., primaries: ["%s"], groups: {gold: {tsig: gold-key}}}]
`, addr, dir, secret, knot.addr)), 0o600)
	updServer(t, dir)
	for _, z := range []string{"y.test.", "x.test."} {
		testutil.Eventually(t, 20*time.Second, func() bool { return serves(addr, z) },
			"switchyard does not serve the catalog member %s (x.test. needs the gold group's key):\n%s", z, func() any { return knot.log() })
	}
}

// catalogProducer is a switchyard server producing the catalog zone catalog (catalog:), which
// notifies consumer.
type catalogProducer struct {
	dir, addr, catalog, consumer string
	srv                          *Server
}

// newCatalogProducer prepares (does not start) the producer of catalog on a port of ports.
func newCatalogProducer(t *testing.T, ports *portRange, catalog, consumer string) *catalogProducer {
	return &catalogProducer{dir: t.TempDir(), addr: fmt.Sprintf("127.0.0.1:%d", ports.free(t)), catalog: catalog, consumer: consumer}
}

// write configures p to serve zones (items of its zones: list) and, once it runs, reloads it.
func (p *catalogProducer) write(t *testing.T, zones string) {
	t.Helper()
	y := fmt.Sprintf("listen: %s\nstate_dir: %s\ncatalog: {zone: %s, transfer: {allow: [127.0.0.1], notify: [\"%s\"]}}\nzones:\n%s",
		p.addr, p.dir, p.catalog, p.consumer, zones)
	if err := os.WriteFile(filepath.Join(p.dir, "dns.yaml"), []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	if p.srv != nil {
		if err := p.srv.ReloadWith(func() (*config.Config, error) { return config.Load(filepath.Join(p.dir, "dns.yaml")) }); err != nil {
			t.Fatal(err)
		}
	}
}

// catalogMember is a zones: item for origin, its ns1 at addr, transferred to 127.0.0.1 with
// NOTIFYs to notify ("": none); extra ends its map.
func catalogMember(origin, addr, notify, extra string) string {
	n := ""
	if notify != "" {
		n = fmt.Sprintf(", notify: [\"%s\"]", notify)
	}
	return fmt.Sprintf("  - {origin: %s, records: [\"@ NS ns1.%s\", \"ns1 A %s\"], transfer: {allow: [127.0.0.1]%s}%s}\n", origin, origin, addr, n, extra)
}

// writeCatalogConsumer writes dir/dns.yaml: a server at addr consuming the producers' catalogs,
// in that order.
func writeCatalogConsumer(t *testing.T, dir, addr string, ps ...*catalogProducer) {
	t.Helper()
	y := fmt.Sprintf("listen: %s\nstate_dir: %s\ncatalogs:\n", addr, dir)
	for _, p := range ps {
		y += fmt.Sprintf("  - {zone: %s, primaries: [\"%s\"]}\n", p.catalog, p.addr)
	}
	if err := os.WriteFile(filepath.Join(dir, "dns.yaml"), []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
}

// memberNS1 is the address the server at addr answers for ns1.m.test. A, "" for none.
func memberNS1(t *testing.T, addr string) string {
	m, _, err := Query(t.Context(), addr, "ns1.m.test.", mdns.TypeA, QueryOptions{Timeout: 300 * time.Millisecond})
	if err != nil || len(m.Answer) != 1 {
		return ""
	}
	return m.Answer[0].(*mdns.A).A.String()
}

// TestCatalogCOOMovesMember: a consumer of two switchyard catalogs serves m.test. from the
// first that listed it; the second listing it too changes nothing (RFC 9432 5.4), until the
// first's coo property hands it over (4.4.1): then m.test. is transferred anew from the second
// catalog's primary, whose copy has the same serial and other data.
func TestCatalogCOOMovesMember(t *testing.T) {
	consumer := fmt.Sprintf("127.0.0.1:%d", catalogPropPorts.free(t))
	zone := func(origin, addr, extra string) string { return catalogMember(origin, addr, "", extra) }
	p1 := newCatalogProducer(t, catalogPropPorts, "cat1.invalid.", consumer)
	p2 := newCatalogProducer(t, catalogPropPorts, "cat2.invalid.", consumer)
	p1.write(t, zone("m.test.", "192.0.2.1", ""))
	p2.write(t, zone("other.test.", "192.0.2.2", ""))
	p1.srv, p2.srv = updServer(t, p1.dir), updServer(t, p2.dir)

	cdir := t.TempDir()
	writeCatalogConsumer(t, cdir, consumer, p1, p2)
	updServer(t, cdir)
	ns1 := func() string { return memberNS1(t, consumer) }
	testutil.Eventually(t, 20*time.Second, func() bool { return ns1() == "192.0.2.1" }, "the consumer does not serve m.test. from cat1's primary")

	// cat2 lists m.test. too (and a new zone, to see that its new copy was taken): m.test.
	// stays with cat1.
	p2.write(t, zone("other.test.", "192.0.2.2", "")+zone("m.test.", "192.0.2.2", "")+zone("new.test.", "192.0.2.2", ""))
	testutil.Eventually(t, 20*time.Second, func() bool { return serves(consumer, "new.test.") }, "the consumer did not take cat2's new copy")
	if got := ns1(); got != "192.0.2.1" {
		t.Fatalf("m.test. listed by a second catalog without a coo: served %q, want cat1's 192.0.2.1", got)
	}

	// cat1's coo hands m.test. to cat2.
	p1.write(t, zone("m.test.", "192.0.2.1", ", catalog: {coo: cat2.invalid.}"))
	testutil.Eventually(t, 20*time.Second, func() bool { return ns1() == "192.0.2.2" },
		"m.test. did not move to cat2 by cat1's coo property (served %q)", func() any { return ns1() })
}
