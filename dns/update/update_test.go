package update

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/zone"
)

const testZone = `$ORIGIN example.com.
$TTL 300
@     IN SOA ns1 hostmaster %SERIAL% 3600 600 604800 60
@     IN NS  ns1
@     IN TXT "apex"
ns1   IN A   192.0.2.53
www   IN A   192.0.2.1
www   IN A   192.0.2.2
alias IN CNAME www
txt   IN TXT "a"
`

// testZoneAt builds the test zone at serial through the zone package, as the server does.
func testZoneAt(t *testing.T, serial string) *zone.Zone {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(strings.Replace(testZone, "%SERIAL%", serial, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`tsig_keys: [{name: k, secret: c3dpdGNoeWFyZC10cmFuc2Zlci10ZXN0LWtleS0zMmI=}, {name: acme, secret: c3dpdGNoeWFyZC10cmFuc2Zlci10ZXN0LWtleS0zMmI=}]
zones:
  - origin: example.com.
    file: zone
    names:
      - {name: app, policy: failover, chain: [x], sites: [{name: x, addresses: [192.0.2.9]}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dir = dir
	s, err := zone.Build(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s.Find("example.com.")
}

// testRules is the allow-list of the tests: key k may change anything, key acme TXT records
// at _acme-challenge and below dyn.
func testRules(t *testing.T) []config.UpdateRule {
	t.Helper()
	cfg, err := config.Parse([]byte(`tsig_keys: [{name: k, secret: c3dpdGNoeWFyZC10cmFuc2Zlci10ZXN0LWtleS0zMmI=}, {name: acme, secret: c3dpdGNoeWFyZC10cmFuc2Zlci10ZXN0LWtleS0zMmI=}]
zones:
  - origin: example.com.
    update:
      allow:
        - {key: k}
        - {key: acme, names: [_acme-challenge, "*.dyn"], types: [TXT]}
`))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Zones[0].Update.Allow
}

func rrs(t *testing.T, texts ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, s := range texts {
		rr, err := dns.NewRR("$ORIGIN example.com.\n" + s)
		if err != nil {
			t.Fatalf("parse %q: %v", s, err)
		}
		out = append(out, rr)
	}
	return out
}

// wire round-trips m, so the records carry the header fields (Rdlength) a server reads.
func wireMsg(t *testing.T, m *dns.Msg) *dns.Msg {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	out := new(dns.Msg)
	if err := out.Unpack(b); err != nil {
		t.Fatal(err)
	}
	return out
}

// set returns the zone's RRset as sorted text, for comparison.
func set(z *zone.Zone, name string, typ uint16) string {
	var out []string
	for _, rr := range z.RRset(name, typ) {
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	slices.Sort(out)
	return strings.Join(out, "; ")
}

func TestPrerequisitesAndUpdates(t *testing.T) {
	type check struct {
		name  string
		typ   uint16
		want  string
		owner string
	}
	cases := []struct {
		name   string
		key    string
		signed bool
		build  func(m *dns.Msg)
		rcode  int  // expected refusal rcode; 0: accepted
		nochg  bool // accepted, nothing changed
		serial uint32
		checks []check
	}{
		{name: "add A", build: func(m *dns.Msg) { m.Insert(rrs(t, "www 300 A 192.0.2.3")) }, serial: 11,
			checks: []check{{name: "www.example.com.", typ: dns.TypeA, want: "www.example.com. 300 IN A 192.0.2.1; www.example.com. 300 IN A 192.0.2.2; www.example.com. 300 IN A 192.0.2.3"}}},
		{name: "add present record", build: func(m *dns.Msg) { m.Insert(rrs(t, "www 300 A 192.0.2.1")) }, nochg: true},
		{name: "add with new TTL changes the RRset's", build: func(m *dns.Msg) { m.Insert(rrs(t, "www 60 A 192.0.2.1")) }, serial: 11,
			checks: []check{{name: "www.example.com.", typ: dns.TypeA, want: "www.example.com. 60 IN A 192.0.2.1; www.example.com. 60 IN A 192.0.2.2"}}},
		{name: "add new name", build: func(m *dns.Msg) { m.Insert(rrs(t, `new 120 TXT "hello"`)) }, serial: 11,
			checks: []check{{name: "new.example.com.", typ: dns.TypeTXT, want: `new.example.com. 120 IN TXT "hello"`}}},
		{name: "delete RRset", build: func(m *dns.Msg) { m.RemoveRRset(rrs(t, "www A 0.0.0.0")) }, serial: 11,
			checks: []check{{name: "www.example.com.", typ: dns.TypeA, want: ""}}},
		{name: "delete record", build: func(m *dns.Msg) { m.Remove(rrs(t, "www A 192.0.2.1")) }, serial: 11,
			checks: []check{{name: "www.example.com.", typ: dns.TypeA, want: "www.example.com. 300 IN A 192.0.2.2"}}},
		{name: "delete absent record", build: func(m *dns.Msg) { m.Remove(rrs(t, "www A 192.0.2.99")) }, nochg: true},
		{name: "delete all at name", build: func(m *dns.Msg) { m.RemoveName(rrs(t, "www A 0.0.0.0")) }, serial: 11,
			checks: []check{{name: "www.example.com.", typ: dns.TypeA, want: ""}}},
		{name: "delete all at apex keeps SOA and NS", build: func(m *dns.Msg) { m.RemoveName(rrs(t, "@ A 0.0.0.0")) }, serial: 11,
			checks: []check{{name: "example.com.", typ: dns.TypeTXT, want: ""},
				{name: "example.com.", typ: dns.TypeNS, want: "example.com. 300 IN NS ns1.example.com."}}},
		{name: "apex NS RRset delete ignored", build: func(m *dns.Msg) { m.RemoveRRset(rrs(t, "@ NS x.")) }, nochg: true},
		{name: "last apex NS kept", build: func(m *dns.Msg) { m.Remove(rrs(t, "@ NS ns1")) }, nochg: true},
		{name: "apex NS replaced", build: func(m *dns.Msg) {
			m.Insert(rrs(t, "@ 300 NS ns2.example.net."))
			m.Remove(rrs(t, "@ NS ns1"))
		}, serial: 11, checks: []check{{name: "example.com.", typ: dns.TypeNS, want: "example.com. 300 IN NS ns2.example.net."}}},
		{name: "SOA delete ignored", build: func(m *dns.Msg) { m.Remove(rrs(t, "@ SOA ns1 hostmaster 10 3600 600 604800 60")) }, nochg: true},
		{name: "SOA with higher serial replaces", build: func(m *dns.Msg) { m.Insert(rrs(t, "@ 300 SOA ns1 hostmaster 50 3600 600 604800 60")) }, serial: 50},
		{name: "SOA with lower serial ignored", build: func(m *dns.Msg) { m.Insert(rrs(t, "@ 300 SOA ns1 hostmaster 5 3600 600 604800 60")) }, nochg: true},
		{name: "CNAME beside data ignored", build: func(m *dns.Msg) { m.Insert(rrs(t, "www 300 CNAME txt")) }, nochg: true},
		{name: "data beside CNAME ignored", build: func(m *dns.Msg) { m.Insert(rrs(t, "alias 300 A 192.0.2.5")) }, nochg: true},
		{name: "CNAME replaces CNAME", build: func(m *dns.Msg) { m.Insert(rrs(t, "alias 300 CNAME txt")) }, serial: 11,
			checks: []check{{name: "alias.example.com.", typ: dns.TypeCNAME, want: "alias.example.com. 300 IN CNAME txt.example.com."}}},
		{name: "add then delete in one message", build: func(m *dns.Msg) {
			m.Insert(rrs(t, "x 300 A 192.0.2.7"))
			m.Remove(rrs(t, "x A 192.0.2.7"))
		}, nochg: true},
		{name: "prereq name in use holds", build: func(m *dns.Msg) {
			m.NameUsed(rrs(t, "www A 0.0.0.0"))
			m.Insert(rrs(t, "www 300 A 192.0.2.3"))
		}, serial: 11},
		{name: "prereq name in use fails", build: func(m *dns.Msg) {
			m.NameUsed(rrs(t, "nope A 0.0.0.0"))
			m.Insert(rrs(t, "www 300 A 192.0.2.3"))
		}, rcode: dns.RcodeNameError},
		{name: "prereq name not in use fails", build: func(m *dns.Msg) { m.NameNotUsed(rrs(t, "www A 0.0.0.0")) }, rcode: dns.RcodeYXDomain},
		{name: "prereq dynamic name is in use", build: func(m *dns.Msg) { m.NameNotUsed(rrs(t, "app A 0.0.0.0")) }, rcode: dns.RcodeYXDomain},
		{name: "prereq RRset exists fails", build: func(m *dns.Msg) { m.RRsetUsed(rrs(t, "www TXT \"x\"")) }, rcode: dns.RcodeNXRrset},
		{name: "prereq RRset exists holds", build: func(m *dns.Msg) { m.RRsetUsed(rrs(t, "www A 0.0.0.0")) }, nochg: true},
		{name: "prereq RRset absent fails", build: func(m *dns.Msg) { m.RRsetNotUsed(rrs(t, "www A 0.0.0.0")) }, rcode: dns.RcodeYXRrset},
		{name: "prereq value-dependent holds", build: func(m *dns.Msg) {
			m.Used(rrs(t, "www A 192.0.2.2", "www A 192.0.2.1"))
			m.Remove(rrs(t, "www A 192.0.2.2"))
		}, serial: 11},
		{name: "prereq value-dependent partial set fails", build: func(m *dns.Msg) { m.Used(rrs(t, "www A 192.0.2.2")) }, rcode: dns.RcodeNXRrset},
		{name: "update out of zone", build: func(m *dns.Msg) { m.Insert(rrs(t, "www.example.org. 300 A 192.0.2.3")) }, rcode: dns.RcodeNotZone},
		{name: "prereq out of zone", build: func(m *dns.Msg) { m.NameUsed(rrs(t, "example.org. A 0.0.0.0")) }, rcode: dns.RcodeNotZone},
		{name: "prereq with TTL", build: func(m *dns.Msg) {
			m.NameUsed(rrs(t, "www A 0.0.0.0"))
			m.Answer[0].Header().Ttl = 5
		}, rcode: dns.RcodeFormatError},
		{name: "delete with TTL", build: func(m *dns.Msg) {
			rr := rrs(t, "www A 0.0.0.0")[0]
			m.RemoveRRset([]dns.RR{rr})
			m.Ns[0].Header().Ttl = 30
		}, rcode: dns.RcodeFormatError},
		{name: "update of class CH", build: func(m *dns.Msg) {
			m.Insert(rrs(t, "www 300 A 192.0.2.3"))
			m.Ns[0].Header().Class = dns.ClassCHAOS
		}, rcode: dns.RcodeFormatError},
		{name: "add of type ANY", build: func(m *dns.Msg) { m.Ns = rrs(t, "www 300 IN TYPE255 \\# 1 00") }, rcode: dns.RcodeFormatError},
		{name: "unsigned", key: "-", build: func(m *dns.Msg) { m.Insert(rrs(t, "www 300 A 192.0.2.3")) }, rcode: dns.RcodeRefused},
		{name: "allowed by name and type", key: "acme.", build: func(m *dns.Msg) { m.Insert(rrs(t, `_acme-challenge 60 TXT "tok"`)) }, serial: 11,
			checks: []check{{name: "_acme-challenge.example.com.", typ: dns.TypeTXT, want: `_acme-challenge.example.com. 60 IN TXT "tok"`}}},
		{name: "allowed below a *. name", key: "acme.", build: func(m *dns.Msg) { m.Insert(rrs(t, `a.b.dyn 60 TXT "tok"`)) }, serial: 11},
		{name: "not allowed: the *. name itself", key: "acme.", build: func(m *dns.Msg) { m.Insert(rrs(t, `dyn 60 TXT "tok"`)) }, rcode: dns.RcodeRefused},
		{name: "not allowed: type", key: "acme.", build: func(m *dns.Msg) { m.Insert(rrs(t, `_acme-challenge 60 A 192.0.2.1`)) }, rcode: dns.RcodeRefused},
		{name: "not allowed: name", key: "acme.", build: func(m *dns.Msg) { m.Insert(rrs(t, `txt 60 TXT "x"`)) }, rcode: dns.RcodeRefused},
		{name: "not allowed: delete all at a name with other types", key: "acme.", build: func(m *dns.Msg) { m.RemoveName(rrs(t, "www.dyn A 0.0.0.0")) }, nochg: true},
		{name: "dynamic name refused", build: func(m *dns.Msg) { m.Insert(rrs(t, "app 300 A 192.0.2.3")) }, rcode: dns.RcodeRefused},
		{name: "DNSKEY of a signed zone refused", signed: true, build: func(m *dns.Msg) {
			m.Insert(rrs(t, "@ 300 DNSKEY 256 3 13 mdsswUyr3DPW132mOi8V9xESWE8jTo0dxCjjnopKl+GqJxpVXckHAeF+KkxLbxILfDLUT0rAK9iUzy1L53eKGQ=="))
		}, rcode: dns.RcodeRefused},
		{name: "a refused record refuses the whole update", key: "acme.", build: func(m *dns.Msg) {
			m.Insert(rrs(t, `_acme-challenge 60 TXT "tok"`, "www 300 A 192.0.2.3"))
		}, rcode: dns.RcodeRefused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			z := testZoneAt(t, "10")
			m := new(dns.Msg)
			m.SetUpdate("example.com.")
			c.build(m)
			key := c.key
			switch key {
			case "":
				key = "k."
			case "-":
				key = ""
			}
			p := Policy{Origin: "example.com.", Rules: testRules(t), Key: key, Signed: c.signed}
			ch, ref := Process(z, z.SOA, wireMsg(t, m), p)
			switch {
			case c.rcode != 0:
				if ref == nil || ref.Rcode != c.rcode {
					t.Fatalf("refusal %v, want rcode %s", ref, dns.RcodeToString[c.rcode])
				}
				return
			case ref != nil:
				t.Fatalf("refused: %v", ref)
			case c.nochg:
				if ch != nil {
					t.Fatalf("change %+v, want none", ch)
				}
				return
			case ch == nil:
				t.Fatal("no change")
			}
			if ch.From != 10 || ch.To != c.serial {
				t.Fatalf("serial %d -> %d, want 10 -> %d", ch.From, ch.To, c.serial)
			}
			nz, err := z.Apply(ch.Del, ch.Add)
			if err != nil {
				t.Fatal(err)
			}
			if nz.SOA.Serial != c.serial || z.SOA.Serial != 10 {
				t.Fatalf("zone serial %d (old zone %d), want %d (10)", nz.SOA.Serial, z.SOA.Serial, c.serial)
			}
			for _, ck := range c.checks {
				if got := set(nz, ck.name, ck.typ); got != ck.want {
					t.Errorf("%s %s: %q, want %q", ck.name, dns.TypeToString[ck.typ], got, ck.want)
				}
			}
		})
	}
}

// RFC 1982: the serial after 2^32-1 wraps, skipping 0, and is still "greater".
func TestSerialWraps(t *testing.T) {
	z := testZoneAt(t, "4294967295")
	m := new(dns.Msg)
	m.SetUpdate("example.com.")
	m.Insert(rrs(t, "www 300 A 192.0.2.3"))
	ch, ref := Process(z, z.SOA, wireMsg(t, m), Policy{Origin: "example.com.", Rules: testRules(t), Key: "k."})
	if ref != nil || ch == nil || ch.To != 1 {
		t.Fatalf("change %+v refusal %v, want serial 1", ch, ref)
	}
}

// The journal replays over the zone as the file built it, a torn last entry is cut off by the
// next append, and an entry that does not chain (the file was edited) moves the old file aside.
func TestJournalAppendReplay(t *testing.T) {
	z := testZoneAt(t, "10")
	path := filepath.Join(t.TempDir(), "j")
	j := NewJournal(path)
	apply := func(z *zone.Zone, text string) (*zone.Zone, *Change) {
		m := new(dns.Msg)
		m.SetUpdate("example.com.")
		m.Insert(rrs(t, text))
		ch, ref := Process(z, z.SOA, wireMsg(t, m), Policy{Origin: "example.com.", Rules: testRules(t), Key: "k."})
		if ref != nil || ch == nil {
			t.Fatalf("update %q: %v", text, ref)
		}
		if err := j.Append(ch, "k.", time.Unix(1e9, 0)); err != nil {
			t.Fatal(err)
		}
		nz, err := z.Apply(ch.Del, ch.Add)
		if err != nil {
			t.Fatal(err)
		}
		return nz, ch
	}
	z1, _ := apply(z, `a 60 TXT "one"`)
	z2, _ := apply(z1, `b 60 TXT "two"`)
	// A crash in the middle of the third entry.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("update 12 13 1000000000 k.\n+ c.example.com. 60 IN TXT \"thr")
	f.Close()
	entries, _, err := Read(path)
	if err != nil || len(entries) != 2 {
		t.Fatalf("read %d entries, %v; want 2", len(entries), err)
	}
	r, n, stale, err := Replay(z, entries)
	if err != nil || n != 2 || stale || r.SOA.Serial != 12 || set(r, "b.example.com.", dns.TypeTXT) != set(z2, "b.example.com.", dns.TypeTXT) {
		t.Fatalf("replay: %d applied, stale %v, serial %d, err %v", n, stale, r.SOA.Serial, err)
	}
	// A fresh journal object (a restart) appends after the torn entry's cut.
	j = NewJournal(path)
	apply(r, `c 60 TXT "three"`)
	if entries, _, err = Read(path); err != nil || len(entries) != 3 {
		t.Fatalf("after append: %d entries, %v; want 3", len(entries), err)
	}
	// The zone file edited to serial 20: the journal does not apply, and the next update moves it aside.
	edited := testZoneAt(t, "20")
	if _, n, stale, _ := Replay(edited, entries); n != 0 || !stale {
		t.Fatalf("replay over an edited file: %d applied, stale %v; want 0, true", n, stale)
	}
	apply(edited, `d 60 TXT "four"`)
	if entries, _, _ = Read(path); len(entries) != 1 || entries[0].From != 20 {
		t.Fatalf("journal after the edit: %+v", entries)
	}
	if _, err := os.Stat(path + ".stale"); err != nil {
		t.Fatalf("the old journal was not moved aside: %v", err)
	}
}
