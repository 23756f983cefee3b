package dns

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnssec"
	"github.com/switchyard/switchyard/dns/zone"
)

// keepZoneText is a small zone for origin at serial, with extra records appended.
func keepZoneText(origin string, serial int, extra string) string {
	return fmt.Sprintf("$ORIGIN %s\n$TTL 300\n@ IN SOA ns1 hostmaster %d 3600 600 604800 60\n@ IN NS ns1\nns1 IN A 192.0.2.1\nwww IN A 192.0.2.2\n%s",
		origin, serial, extra)
}

// keepYAML serves a.test., b.test. and c.test. from files; b and c are transferred and notify
// notify. ttlA is zone a's default TTL (a configuration change that leaves its file alone).
func keepYAML(notify string, ttlA int) string {
	xfr := "    transfer: {allow: [127.0.0.0/8], notify: [" + notify + "], journal: 10}\n"
	return fmt.Sprintf("zones:\n  - origin: a.test.\n    file: a.zone\n    ttl: %d\n", ttlA) +
		"  - origin: b.test.\n    file: b.zone\n" + xfr +
		"  - origin: c.test.\n    file: c.zone\n" + xfr
}

// zonesByOrigin indexes the server's zones.
func zonesByOrigin(srv *Server) map[string]*zone.Zone {
	out := map[string]*zone.Zone{}
	for _, z := range srv.Zones() {
		out[z.Origin] = z
	}
	return out
}

// A reload carries a zone whose configuration and file content are unchanged over as the same
// object, whatever the file's mtime says; a zone whose content changed (even behind an mtime
// put back) or whose configuration changed is rebuilt. An unchanged zone sends no NOTIFY and
// keeps its serial and journal; the changed one notifies and journals its step as before.
func TestReloadCarriesUnchangedZones(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.zone", keepZoneText("a.test.", 1, ""))
	write("b.zone", keepZoneText("b.test.", 1, "old IN A 192.0.2.7\n"))
	write("c.zone", keepZoneText("c.test.", 1, ""))
	sec := newNotifyCatcher(t)
	notify := sec.pc.LocalAddr().String()
	load := func(ttlA int) *config.Config {
		cfg, err := config.Parse([]byte(keepYAML(notify, ttlA)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listen, cfg.Dir = "127.0.0.1:0", dir
		return cfg
	}
	srv := startConfig(t, load(300), Options{Logger: testLogger(t)})
	for range 2 { // the start-up NOTIFYs of b and c
		if sec.next(t, 5*time.Second) == nil {
			t.Fatal("no start-up NOTIFY")
		}
	}
	before := zonesByOrigin(srv)
	xfrBefore := transferLine(srv, "c.test.")

	// a: touched, same content. b: new content and serial, mtime put back. c: untouched.
	past := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "b.zone"), past, past)
	write("a.zone", keepZoneText("a.test.", 1, ""))
	write("b.zone", keepZoneText("b.test.", 2, "new IN A 192.0.2.8\n"))
	os.Chtimes(filepath.Join(dir, "b.zone"), past, past)
	if err := srv.Reload(load(300)); err != nil {
		t.Fatal(err)
	}
	after := zonesByOrigin(srv)
	if after["a.test."] != before["a.test."] || after["c.test."] != before["c.test."] {
		t.Errorf("unchanged zones rebuilt by the reload: a %v, c %v (want the same objects)",
			after["a.test."] == before["a.test."], after["c.test."] == before["c.test."])
	}
	if after["b.test."] == before["b.test."] || after["b.test."].SOA.Serial != 2 {
		t.Fatalf("b.test. changed behind a restored mtime but was not rebuilt (serial %d)", after["b.test."].SOA.Serial)
	}
	m := sec.next(t, 5*time.Second)
	if m == nil || m.Question[0].Name != "b.test." || m.Answer[0].(*mdns.SOA).Serial != 2 {
		t.Fatalf("NOTIFY after changing b.test.: %v, want b.test. serial 2", m)
	}
	if m := sec.next(t, 1500*time.Millisecond); m != nil {
		t.Fatalf("NOTIFY for a zone the reload did not change: %v", m)
	}
	if x := transferLine(srv, "c.test."); x != xfrBefore || !strings.Contains(x, "serial 1,") || !strings.Contains(x, "journal 0/10") {
		t.Errorf("unchanged c.test. transfer data changed: %q, before %q", x, xfrBefore)
	}
	if x := transferLine(srv, "b.test."); !strings.Contains(x, "journal 1/10") {
		t.Errorf("b.test. journal after its change: %q, want one step", x)
	}
	if del, add := ixfrStep(t, srv, "b.test.", 1); !hasOwner(add, "new.b.test.") || !hasOwner(del, "old.b.test.") {
		t.Errorf("b.test. IXFR from serial 1: deleted %v, added %v, want one step deleting old and adding new", del, add)
	}
	if resp := q(t, srv, "new.b.test.", mdns.TypeA, QueryOptions{}); len(resp.Answer) != 1 || !strings.Contains(resp.Answer[0].String(), "192.0.2.8") {
		t.Errorf("the changed zone's new record is not served: %v", resp)
	}

	// A configuration change alone (a's default TTL) rebuilds that zone and no other.
	if err := srv.Reload(load(600)); err != nil {
		t.Fatal(err)
	}
	again := zonesByOrigin(srv)
	if again["a.test."] == after["a.test."] || again["b.test."] != after["b.test."] || again["c.test."] != after["c.test."] {
		t.Errorf("after changing a's ttl: a rebuilt %v (want true), b kept %v, c kept %v (want true)",
			again["a.test."] != after["a.test."], again["b.test."] == after["b.test."], again["c.test."] == after["c.test."])
	}
}

// A signed zone whose data and keys are unchanged is carried over and still answers signed; a
// new key (same configuration, new key file content) rebuilds it with the new DNSKEY.
func TestReloadCarriesSignedZone(t *testing.T) {
	yml, _ := signedZone(t)
	srv := startServer(t, yml, Options{})
	before := zonesByOrigin(srv)["example."]
	reload := func() {
		t.Helper()
		cfg, err := config.Parse([]byte(yml))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listen, cfg.Dir = "127.0.0.1:0", "testdata"
		if err := srv.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	reload()
	if zonesByOrigin(srv)["example."] != before {
		t.Fatal("an unchanged signed zone was rebuilt by the reload")
	}
	addr := srv.Addr().String()
	resp, _, err := Query(context.Background(), addr, "www.example.", mdns.TypeA, QueryOptions{DNSSEC: true})
	if err != nil || len(resp.Answer) != 2 || resp.Answer[1].Header().Rrtype != mdns.TypeRRSIG {
		t.Fatalf("signed answer after the reload: %v %v", err, resp)
	}
	keyFile := srv.Config().Zones[0].DNSSEC.KeyFile
	oldKey, _ := dnskeyOf(t, addr)
	k, err := newCSK("example.")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, k, 0o600); err != nil {
		t.Fatal(err)
	}
	reload()
	if zonesByOrigin(srv)["example."] == before {
		t.Fatal("a zone whose key file changed was carried over with the old DNSKEY")
	}
	if newKey, _ := dnskeyOf(t, addr); newKey == oldKey {
		t.Fatalf("DNSKEY after the key change: %s, the old one", newKey)
	}
}

// dnskeyOf returns the text of the first DNSKEY served at example.
func dnskeyOf(t *testing.T, addr string) (string, error) {
	t.Helper()
	resp, _, err := Query(context.Background(), addr, "example.", mdns.TypeDNSKEY, QueryOptions{DNSSEC: true})
	if err != nil || len(resp.Answer) == 0 {
		t.Fatalf("DNSKEY query: %v %v", err, resp)
	}
	return resp.Answer[0].String(), nil
}

// hasOwner reports whether rrs has a record owned by name.
// transferLine is the TransferSummary line of zone origin.
func transferLine(srv *Server, origin string) string {
	for _, l := range srv.TransferSummary() {
		if strings.HasPrefix(l, "transfer "+origin+": serial") {
			return l
		}
	}
	return ""
}

// ixfrStep transfers zone origin incrementally from serial over TCP and returns the records the
// one journal step deletes and adds (RFC 1995: SOA, old SOA, deleted, new SOA, added, SOA).
func ixfrStep(t *testing.T, srv *Server, origin string, serial uint32) (del, add []mdns.RR) {
	t.Helper()
	m := new(mdns.Msg)
	m.SetIxfr(origin, serial, "ns1."+origin, "hostmaster."+origin)
	env, err := new(mdns.Transfer).In(m, srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var rrs []mdns.RR
	for e := range env {
		if e.Error != nil {
			t.Fatal(e.Error)
		}
		rrs = append(rrs, e.RR...)
	}
	var soas []int
	for i, rr := range rrs {
		if _, ok := rr.(*mdns.SOA); ok {
			soas = append(soas, i)
		}
	}
	if len(soas) != 4 || soas[0] != 0 || soas[1] != 1 || soas[3] != len(rrs)-1 {
		t.Fatalf("IXFR of %s from %d is not one step: %v", origin, serial, rrs)
	}
	return rrs[2:soas[2]], rrs[soas[2]+1 : soas[3]]
}

func hasOwner(rrs []mdns.RR, name string) bool {
	for _, rr := range rrs {
		if rr.Header().Name == name {
			return true
		}
	}
	return false
}

// newCSK returns the file of a new combined signing key for zone.
func newCSK(zone string) ([]byte, error) {
	k, err := dnssec.Generate(zone, dnssec.FlagsKSK, 3600)
	if err != nil {
		return nil, err
	}
	return k.File(time.Now()), nil
}
