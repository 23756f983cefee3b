package dns

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnssec"
)

// updPorts are the update tests' loopback ports.
var updPorts = &portRange{first: 22100, last: 22199}

// Secrets of the update tests' keys (base64).
const (
	updSecret    = "dXBkYXRlLWtleS1zd2l0Y2h5YXJkLXRlc3RzLTMyYnl0ZXM="
	upd512Secret = "dXBkYXRlLWtleS01MTItc3dpdGNoeWFyZC10ZXN0cy02NGJ5dGVzLWxvbmctZW5vdWdoLWZvci1zaGE1MTI="
	acmeSecret   = "YWNtZS1rZXktc3dpdGNoeWFyZC10ZXN0cy0zMi1ieXRlcw=="
	wrongSecret  = "d3Jvbmctc2VjcmV0LXN3aXRjaHlhcmQtdGVzdHMtMzJi"
)

// updZone is the zone file the update tests start from.
const updZone = `$ORIGIN example.
$TTL 300
@     IN SOA ns1 hostmaster 1 3600 600 604800 60
@     IN NS  ns1
ns1   IN A   127.0.0.1
www   IN A   192.0.2.1
`

// updYAML configures example. (signed online, served to secondaries, updatable) and other.test.
// (no update block).
func updYAML(port int, keyFile, notify string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:%d
tsig_keys:
  - {name: upd-key, algorithm: hmac-sha256, secret: "%s"}
  - {name: upd512, algorithm: hmac-sha512, secret: "%s"}
  - {name: acme, secret: "%s"}
zones:
  - origin: example.
    file: example.zone
    dnssec: {key_file: %s}
    transfer: {allow: [127.0.0.1], notify: ["%s"]}
    update:
      allow:
        - {key: upd-key}
        - {key: upd512}
        - {key: acme, names: [_acme-challenge], types: [TXT]}
  - origin: other.test.
    records: ["@ NS ns1.example."]
`, port, updSecret, upd512Secret, acmeSecret, keyFile, notify)
}

// updServer starts a server of the config in dir; restart closes it and starts another on the
// same files, as a restarted process would.
func updServer(t *testing.T, dir string) *Server {
	t.Helper()
	cfg, err := config.Load(filepath.Join(dir, "dns.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return startConfig(t, cfg, Options{Logger: testLogger(t)})
}

// nsupdate runs Debian's nsupdate with the key alg:name:secret on script (the server and zone
// lines are added) and returns its output and whether it succeeded.
func nsupdate(t *testing.T, srv *Server, key string, tcp bool, script string) (string, bool) {
	t.Helper()
	bin := needBinary(t, "nsupdate", "bind9-dnsutils")
	a := srv.Addr()
	args := []string{"-y", key}
	if tcp {
		args = append(args, "-v")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(fmt.Sprintf("server %s %d\nzone example.\ncheck-names no\n%s\nsend\n", a.Addr(), a.Port(), script))
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// answer asks srv name/qtype and returns the answer section as text, one record a line.
func answer(t *testing.T, srv *Server, name string, qtype uint16) string {
	t.Helper()
	m := q(t, srv, name, qtype, QueryOptions{})
	var lines []string
	for _, rr := range m.Answer {
		lines = append(lines, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	return strings.Join(lines, "\n")
}

// TestNsupdateEndToEnd drives the server with BIND's nsupdate: adds over UDP and TCP with
// HMAC-SHA256 and -SHA512 keys, a delete, and the refusals (prerequisite, bad and unknown keys,
// out of zone, a type the key may not change, a zone without updates), each with its rcode and
// nothing changed; then answers (signed, validated by delv), an IXFR, the NOTIFY, a reload and
// a restart see the updates.
func TestNsupdateEndToEnd(t *testing.T) {
	dir := t.TempDir()
	k, err := dnssec.Generate("example.", dnssec.FlagsKSK, 3600)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "example.key")
	sec := newNotifyCatcher(t)
	for name, text := range map[string]string{"example.key": string(k.File(time.Now())), "example.zone": updZone,
		"dns.yaml": updYAML(updPorts.free(t), keyFile, sec.pc.LocalAddr().String())} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srv := updServer(t, dir)
	if m := sec.next(t, 5*time.Second); m == nil {
		t.Fatal("no NOTIFY at start")
	}
	journal := filepath.Join(dir, "example.zone.updates")
	serial := func() uint32 { return srv.state.Load().store.Find("example.").SOA.Serial }
	key256, key512, acme := "hmac-sha256:upd-key:"+updSecret, "hmac-sha512:upd512:"+upd512Secret, "hmac-sha256:acme:"+acmeSecret

	// Applied: an add over UDP, an add over TCP with the SHA-512 key, a delete, an ACME TXT.
	for _, c := range []struct{ key, script string }{
		{key256, "update add new.example. 60 A 192.0.2.77"},
		{key512, "update add txt.example. 60 TXT \"over tcp\""},
		{key256, "update delete www.example. A"},
		{acme, "update add _acme-challenge.example. 60 TXT \"token-1\""},
	} {
		before := serial()
		if out, ok := nsupdate(t, srv, c.key, c.key == key512, c.script); !ok {
			t.Fatalf("%s: nsupdate failed:\n%s", c.script, out)
		}
		if serial() != before+1 {
			t.Fatalf("%s: serial %d, want %d", c.script, serial(), before+1)
		}
	}
	if got := answer(t, srv, "new.example.", mdns.TypeA); got != "new.example. 60 IN A 192.0.2.77" {
		t.Fatalf("new.example. A: %q", got)
	}
	if m := q(t, srv, "www.example.", mdns.TypeA, QueryOptions{}); len(m.Answer) != 0 || len(m.Ns) == 0 {
		t.Fatalf("www.example. A after the delete:\n%v", m)
	}

	// Refused: each with its rcode, the zone and the journal unchanged.
	before, _ := os.ReadFile(journal)
	s0 := serial()
	for _, c := range []struct{ key, script, want string }{
		{key256, "prereq nxdomain new.example.\nupdate add new.example. 60 A 192.0.2.78", "YXDOMAIN"},
		{key256, "prereq yxrrset www.example. A\nupdate add new.example. 60 A 192.0.2.78", "NXRRSET"},
		{"hmac-sha256:upd-key:" + wrongSecret, "update add bad.example. 60 A 192.0.2.1", "BADSIG"},
		{"hmac-sha256:nobody:" + updSecret, "update add bad.example. 60 A 192.0.2.1", "BADKEY"},
		{"hmac-sha512:upd-key:" + updSecret, "update add bad.example. 60 A 192.0.2.1", "BADKEY"},
		{key256, "update add bad.example.org. 60 A 192.0.2.1", "NOTZONE"},
		{acme, "update add _acme-challenge.example. 60 A 192.0.2.1", "REFUSED"},
		{acme, "update add www.example. 60 TXT \"x\"", "REFUSED"},
		{key256, "update add example. 300 DNSKEY 256 3 13 " + k.DNSKEY.PublicKey, "REFUSED"},
	} {
		out, ok := nsupdate(t, srv, c.key, false, c.script)
		if ok || !strings.Contains(out, c.want) {
			t.Errorf("%s (%s): nsupdate ok=%v, want a failure naming %s:\n%s", c.script, c.key[:strings.LastIndex(c.key, ":")], ok, c.want, out)
		}
	}
	// A zone with no update block: REFUSED.
	bin := needBinary(t, "nsupdate", "bind9-dnsutils")
	cmd := exec.Command(bin, "-y", key256)
	cmd.Stdin = strings.NewReader(fmt.Sprintf("server %s %d\nzone other.test.\nupdate add x.other.test. 60 A 192.0.2.1\nsend\n", srv.Addr().Addr(), srv.Addr().Port()))
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "REFUSED") {
		t.Errorf("update of a zone without update: %v\n%s", err, out)
	}
	if after, _ := os.ReadFile(journal); serial() != s0 || !bytes.Equal(before, after) {
		t.Fatalf("refused updates changed something: serial %d (was %d), journal changed %v", serial(), s0, !bytes.Equal(before, after))
	}
	for label, want := range map[string]float64{"ok": 4, "refused": 3, "notauth": 3, "notzone": 1, "yxdomain": 1, "nxrrset": 1} {
		if got := counterValue(srv.ops.updates.WithLabelValues("example.", label)); got != want {
			t.Errorf("switchyard_dns_updates_total{zone=example.,result=%s} = %v, want %v", label, got, want)
		}
	}
	if got := answer(t, srv, "bad.example.", mdns.TypeA); got != "" {
		t.Fatalf("bad.example. answers %q", got)
	}

	// Signed like the rest: delv validates the added records and the deletion's denial.
	anchor := anchorFile(t, k)
	for _, c := range []struct{ name, qtype, want string }{
		{"new.example.", "A", "192.0.2.77"},
		{"_acme-challenge.example.", "TXT", "token-1"},
		{"www.example.", "A", "negative response"},
	} {
		if out := delv(t, srv, anchor, c.name, c.qtype); !strings.Contains(out, "fully validated") || !strings.Contains(out, c.want) {
			t.Errorf("delv %s %s:\n%s", c.name, c.qtype, out)
		}
	}

	// Secondaries: a NOTIFY of the last serial, and an IXFR from serial 1 carries the updates.
	var last *mdns.Msg
	for m := sec.next(t, 5*time.Second); m != nil; m = sec.next(t, 500*time.Millisecond) {
		last = m
	}
	if last == nil || len(last.Answer) != 1 || last.Answer[0].(*mdns.SOA).Serial != s0 {
		t.Fatalf("last NOTIFY %v, want one for serial %d", last, s0)
	}
	ixfr := new(mdns.Msg)
	ixfr.SetIxfr("example.", 1, "ns1.example.", "hostmaster.example.")
	env, err := (&mdns.Transfer{}).In(ixfr, srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var got []mdns.RR
	for e := range env {
		if e.Error != nil {
			t.Fatal(e.Error)
		}
		got = append(got, e.RR...)
	}
	if len(got) < 3 || got[1].Header().Rrtype != mdns.TypeSOA || got[1].(*mdns.SOA).Serial != 1 {
		t.Fatalf("IXFR from 1 is not incremental:\n%v", got)
	}
	for _, want := range []string{"new.example. 60 IN A 192.0.2.77", `_acme-challenge.example. 60 IN TXT "token-1"`, "www.example. 300 IN A 192.0.2.1"} {
		if !hasRecord(got, want) {
			t.Errorf("IXFR lacks %q:\n%v", want, got)
		}
	}

	// A reload and a restart keep the updates: the journal is replayed over the zone file.
	cfg, err := config.Load(filepath.Join(dir, "dns.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Zones[0].TTL = 301 // a configuration change rebuilds the zone from its file
	if err := srv.Reload(cfg); err != nil || serial() != s0 || answer(t, srv, "new.example.", mdns.TypeA) == "" {
		t.Fatalf("after a reload: err %v, serial %d (want %d), new.example. %q", err, serial(), s0, answer(t, srv, "new.example.", mdns.TypeA))
	}
	srv.Close()
	srv = updServer(t, dir)
	if serial() != s0 {
		t.Fatalf("restarted at serial %d, want %d", serial(), s0)
	}
	for name, want := range map[string]string{"new.example.": "new.example. 60 IN A 192.0.2.77", "www.example.": "",
		"txt.example.": `txt.example. 60 IN TXT "over tcp"`} {
		qt := mdns.TypeA
		if strings.HasPrefix(name, "txt") {
			qt = mdns.TypeTXT
		}
		if got := answer(t, srv, name, qt); got != want {
			t.Errorf("after restart %s: %q, want %q", name, got, want)
		}
	}
	// And it takes more updates after the restart, on the same journal.
	if out, ok := nsupdate(t, srv, key256, true, "update delete _acme-challenge.example. TXT \"token-1\""); !ok || serial() != s0+1 {
		t.Fatalf("update after restart: serial %d\n%s", serial(), out)
	}
}

// addNewA sends srv the update adding new.example. 60 A 192.0.2.9, signed with upd-key.
func addNewA(srv *Server) (*mdns.Msg, error) {
	m := new(mdns.Msg)
	m.SetUpdate("example.")
	rr, _ := mdns.NewRR("new.example. 60 A 192.0.2.9")
	m.Insert([]mdns.RR{rr})
	m.SetTsig("upd-key.", mdns.HmacSHA256, 300, time.Now().Unix())
	c := &mdns.Client{TsigSecret: map[string]string{"upd-key.": updSecret}, Timeout: 2 * time.Second}
	resp, _, err := c.Exchange(m, srv.Addr().String())
	return resp, err
}

// An update whose journal cannot be written is SERVFAIL and changes nothing: what is answered
// is what a restart would load.
func TestUpdateUnwritableJournalChangesNothing(t *testing.T) {
	srv := startServer(t, `tsig_keys: [{name: upd-key, secret: "`+updSecret+`"}]
zones:
  - origin: example.
    soa: {serial: 7}
    records: ["www A 192.0.2.1"]
    update: {journal: /nonexistent-switchyard-dir/j, allow: [{key: upd-key}]}
`, Options{Logger: testLogger(t)})
	resp, err := addNewA(srv)
	if err != nil || resp.Rcode != mdns.RcodeServerFailure {
		t.Fatalf("update: %v %v, want SERVFAIL", resp, err)
	}
	if s := srv.state.Load().store.Find("example.").SOA.Serial; s != 7 || answer(t, srv, "new.example.", mdns.TypeA) != "" {
		t.Fatalf("serial %d and new.example. answered after a failed update", s)
	}
}

// TestKeyChangeKeepsUpdatesWithoutReplay: a reload that changes only a signed zone's keys (a
// key published, as a key policy's rollover does at its steps) takes the zone as served,
// updates included, instead of rebuilding it from its records and replaying the update journal,
// a rebuild of the zone per update it holds (thousands on a busy zone, at every such step). The
// journal is damaged after the update: a replay would fail the reload or lose the update.
func TestKeyChangeKeepsUpdatesWithoutReplay(t *testing.T) {
	dir := t.TempDir()
	csk, zsk := writeKey(t, filepath.Join(dir, "csk.key"), dnssec.FlagsKSK), writeKey(t, filepath.Join(dir, "zsk.key"), dnssec.FlagsZSK)
	journal := filepath.Join(dir, "example.updates")
	yml := func(dnssecBlock string) string {
		return `tsig_keys: [{name: upd-key, secret: "` + updSecret + `"}]
zones:
  - origin: example.
    soa: {serial: 7}
    records: ["www A 192.0.2.1"]
    dnssec: ` + dnssecBlock + `
    update: {journal: ` + journal + `, allow: [{key: upd-key}]}
`
	}
	srv := startServer(t, yml("{key_file: "+csk+"}"), Options{Logger: testLogger(t)})
	if resp, err := addNewA(srv); err != nil || resp.Rcode != mdns.RcodeSuccess {
		t.Fatalf("update: %v %v", resp, err)
	}
	if err := os.WriteFile(journal, []byte("update 1 2 garbage\n+ not a record\nend\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(yml("{key_file: " + csk + ", publish: [" + zsk + "]}")))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(cfg); err != nil {
		t.Fatalf("reload with a key published: %v (the update journal was read again)", err)
	}
	if got := answer(t, srv, "new.example.", mdns.TypeA); !strings.Contains(got, "192.0.2.9") {
		t.Fatalf("after the reload, new.example. A is %q: the update was lost", got)
	}
	if keys := q(t, srv, "example.", mdns.TypeDNSKEY, QueryOptions{}); len(keys.Answer) != 2 {
		t.Fatalf("DNSKEY RRset after publishing a second key: %v", keys.Answer)
	}
	if s := srv.state.Load().store.Find("example.").SOA.Serial; s != 8 {
		t.Fatalf("serial %d after one update and a key change, want 8", s)
	}
}

// An update of one zone keeps the answer cache: the other zones' cached answers stay fresh (a
// host of 100,000 zones does not lose them all to one zone's update), and the updated zone's
// go stale, so its changed name is answered anew.
func TestUpdateKeepsOtherZonesCachedAnswers(t *testing.T) {
	srv := startServer(t, `tsig_keys: [{name: upd-key, secret: "`+updSecret+`"}]
zones:
  - origin: example.
    soa: {serial: 7}
    records: ["www A 192.0.2.1"]
    update: {journal: `+filepath.Join(t.TempDir(), "j")+`, allow: [{key: upd-key}]}
  - origin: other.test.
    records: ["www A 192.0.2.2"]
`, Options{Logger: testLogger(t)})
	if a := answer(t, srv, "www.example.", mdns.TypeA); !strings.Contains(a, "192.0.2.1") {
		t.Fatalf("www.example. before the update: %q", a)
	}
	if a := answer(t, srv, "www.other.test.", mdns.TypeA); !strings.Contains(a, "192.0.2.2") {
		t.Fatalf("www.other.test. before the update: %q", a)
	}
	cache := srv.state.Load().cache
	fresh := func(origin string) (n int) {
		for i := range cache.shards {
			sh := &cache.shards[i]
			sh.mu.RLock()
			for _, e := range sh.ring {
				if z := e.zone.Load(); z != nil && z.Origin == origin && e.fresh(srv.healthGen.Load(), srv.unixNow()) {
					n++
				}
			}
			sh.mu.RUnlock()
		}
		return n
	}
	if fresh("example.") != 1 || fresh("other.test.") != 1 {
		t.Fatalf("cached before the update: example. %d, other.test. %d; want 1 each", fresh("example."), fresh("other.test."))
	}
	m := new(mdns.Msg)
	m.SetUpdate("example.")
	old, _ := mdns.NewRR("www.example. 300 A 192.0.2.1")
	rr, _ := mdns.NewRR("www.example. 300 A 192.0.2.7")
	m.Remove([]mdns.RR{old})
	m.Insert([]mdns.RR{rr})
	m.SetTsig("upd-key.", mdns.HmacSHA256, 300, time.Now().Unix())
	c := &mdns.Client{TsigSecret: map[string]string{"upd-key.": updSecret}, Timeout: 2 * time.Second}
	if resp, _, err := c.Exchange(m, srv.Addr().String()); err != nil || resp.Rcode != mdns.RcodeSuccess {
		t.Fatalf("update: %v %v", resp, err)
	}
	if srv.state.Load().cache != cache {
		t.Fatal("the update replaced the answer cache")
	}
	if fresh("example.") != 0 || fresh("other.test.") != 1 {
		t.Fatalf("cached after the update: example. %d fresh, other.test. %d; want 0 and 1", fresh("example."), fresh("other.test."))
	}
	if a := answer(t, srv, "www.example.", mdns.TypeA); !strings.Contains(a, "192.0.2.7") || strings.Contains(a, "192.0.2.1") {
		t.Fatalf("www.example. after the update: %q, want 192.0.2.7 alone", a)
	}
}
