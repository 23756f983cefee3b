package zone

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

func build(t *testing.T, records ...string) (*Store, error) {
	t.Helper()
	return buildZones(t, config.Zone{Origin: "z.test.", Records: records})
}

// buildZones builds a store of zones (a configuration that must validate).
func buildZones(tb testing.TB, zones ...config.Zone) (*Store, error) {
	tb.Helper()
	c := &config.Config{Zones: zones}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		tb.Fatal(err)
	}
	return Build(c, nil, nil)
}

func TestBadZoneData(t *testing.T) {
	for want, recs := range map[string][]string{
		"already has a CNAME":     {"a CNAME b", "a A 192.0.2.1"},
		"cannot coexist":          {"a A 192.0.2.1", "a CNAME b"},
		"outside the zone":        {"www.other.test. A 192.0.2.1"},
		"two SOA":                 {"@ SOA ns h 1 2 3 4 5", "@ SOA ns h 2 2 3 4 5"},
		"SOA must be at the apex": {"sub SOA ns h 1 2 3 4 5"},
		"parse records":           {"www A 300.0.0.1"},
		"class CH":                {"www CH TXT hello"},
	} {
		if _, err := build(t, recs...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want %q", recs, err, want)
		}
	}
}

func TestLookupKinds(t *testing.T) {
	s, err := build(t, "www A 192.0.2.1", "a CNAME b", "b CNAME www", "loop1 CNAME loop2", "loop2 CNAME loop1",
		"x.y.deep A 192.0.2.2", "out CNAME www.elsewhere.test.", "dangling CNAME nothing",
		"*.wild A 192.0.2.3", "*.wild TXT hi", "exists.wild A 192.0.2.4", "*.c CNAME www")
	if err != nil {
		t.Fatal(err)
	}
	z := s.Find("www.z.test.")
	if z == nil || s.Find("www.other.test.") != nil || s.Find("z.test.") != z {
		t.Fatal("Find by longest suffix failed")
	}
	cases := []struct {
		name    string
		qtype   uint16
		kind    Kind
		answers int
	}{
		{"www.z.test.", dns.TypeA, Answer, 1},
		{"a.z.test.", dns.TypeA, Answer, 3}, // two CNAMEs and the A
		{"loop1.z.test.", dns.TypeA, Answer, maxChain + 1},
		{"y.deep.z.test.", dns.TypeA, NoData, 0}, // empty non-terminal
		{"nope.z.test.", dns.TypeA, NXDomain, 0},
		{"www.z.test.", dns.TypeMX, NoData, 0},
		{"out.z.test.", dns.TypeA, Answer, 1},
		{"dangling.z.test.", dns.TypeA, NXDomain, 1},
		{"z.test.", dns.TypeSOA, Answer, 1},
		{"z.test.", dns.TypeNS, Answer, 1},          // synthesised from the SOA
		{"any.wild.z.test.", dns.TypeA, Answer, 1},  // RFC 4592 synthesis
		{"any.wild.z.test.", dns.TypeMX, NoData, 0}, // the wildcard exists, not with MX
		{"exists.wild.z.test.", dns.TypeA, Answer, 1},
		{"below.exists.wild.z.test.", dns.TypeA, NXDomain, 0}, // closest encloser has no wildcard
		{"q.c.z.test.", dns.TypeA, Answer, 2},                 // wildcard CNAME, then www
	}
	for _, c := range cases {
		r := z.Lookup(c.name, c.qtype)
		if len(r.Answer) > 0 && r.Answer[0].Header().Name != c.name {
			t.Errorf("%s: answer owner %s, want the asked name", c.name, r.Answer[0].Header().Name)
		}
		if r.Kind != c.kind || len(r.Answer) != c.answers {
			t.Errorf("%s %s: kind %d answers %d, want %d %d", c.name, dns.TypeToString[c.qtype], r.Kind, len(r.Answer), c.kind, c.answers)
		}
		if (r.Kind == NoData || r.Kind == NXDomain) && (len(r.Ns) != 1 || r.Ns[0].Header().Ttl != 60) {
			t.Errorf("%s: negative answer without the SOA at min(ttl, minimum): %v", c.name, r.Ns)
		}
	}
}

func TestSignedZoneRejectsDNSSECRecordsAndTypesList(t *testing.T) {
	c := &config.Config{Zones: []config.Zone{{Origin: "z.test.", DNSSEC: &config.DNSSEC{KeyFile: "k"},
		Records: []string{"www A 192.0.2.1", "www RRSIG A 13 3 300 20300101000000 20200101000000 1 z.test. AAAA"}}}}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(c, nil, nil); err == nil || !strings.Contains(err.Error(), "signed online") {
		t.Fatalf("presigned record in a signed zone: %v", err)
	}
	s, err := build(t, "www A 192.0.2.1", "www TXT hi", "*.w A 192.0.2.2", "a.b.c CNAME www")
	if err != nil {
		t.Fatal(err)
	}
	z := s.Find("z.test.")
	for name, want := range map[string][]uint16{"www.z.test.": {dns.TypeA, dns.TypeTXT}, "x.w.z.test.": {dns.TypeA},
		"b.c.z.test.": nil, "nope.z.test.": nil} {
		if got := z.Types(name); len(got) != len(want) || len(want) > 0 && got[0] != want[0] {
			t.Errorf("Types(%s) = %v, want %v", name, got, want)
		}
	}
}

// packedZone has records of many types, an RRset of mixed TTLs and duplicates, one of them
// differing only in the case of a name.
const packedZone = `$ORIGIN z.test.
$TTL 300
@ SOA ns1 hostmaster 3 3600 600 604800 60
@ NS ns1
@ NS NS1.z.test.
@ MX 10 Mail
ns1 A 192.0.2.1
www 60 A 192.0.2.10
www 120 A 192.0.2.11
www A 192.0.2.10
www AAAA 2001:db8::10
txt TXT "a b" "c\"d" "\065"
srv SRV 1 2 3 www
caa CAA 0 issue "ca.example"
tlsa TLSA 3 1 1 ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789
svc HTTPS 1 . alpn=h2 ipv4hint=192.0.2.10
loc LOC 52 22 23.000 N 4 53 32.000 E -2.00m 0.00m 10000m 10m
gen TYPE65534 \# 3 010203
naptr NAPTR 100 10 "U" "E2U+sip" "!^.*$!sip:x@example.com!" .
`

// The packed form returns every parsed record with the same wire form (owner lowercased, one
// TTL per RRset, the lowest), drops duplicates as dns.IsDuplicate judges them, and transfers
// exactly what it answers.
func TestPackedMatchesParsed(t *testing.T) {
	s, err := build(t, strings.Split(strings.TrimSpace(packedZone), "\n")[2:]...)
	if err != nil {
		t.Fatal(err)
	}
	z := s.Find("z.test.")
	zp := dns.NewZoneParser(strings.NewReader(packedZone), "", "")
	wire := func(rr dns.RR) string {
		buf := make([]byte, 4096)
		n, err := dns.PackRR(rr, buf, 0, nil, false)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}
	parsed := 0
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		parsed++
		h := rr.Header()
		h.Name = strings.ToLower(h.Name)
		res := z.Lookup(h.Name, h.Rrtype)
		if res.Kind != Answer || len(res.Answer) == 0 {
			t.Errorf("%v: lookup kind %d, %d answers", rr, res.Kind, len(res.Answer))
			continue
		}
		h.Ttl = res.Answer[0].Header().Ttl // the RRset's, checked below
		found := false
		for _, a := range res.Answer {
			found = found || wire(a) == wire(rr) || dns.IsDuplicate(a, rr)
		}
		if !found {
			t.Errorf("%v: not answered as parsed; answers %v", rr, res.Answer)
		}
	}
	if www := z.Lookup("www.z.test.", dns.TypeA).Answer; len(www) != 2 || www[0].Header().Ttl != 60 || www[1].Header().Ttl != 60 {
		t.Errorf("www A: %v, want 192.0.2.10 and .11 at the lowest TTL, 60", www)
	}
	if ns := z.Lookup("z.test.", dns.TypeNS).Answer; len(ns) != 1 {
		t.Errorf("apex NS: %v, want one record (ns1 and NS1 are duplicates)", ns)
	}
	want := parsed - 1 /* SOA */ - 2 /* the duplicates */
	if got := z.Records(); len(got) != want || z.RecordsLen() != want || z.Count() != want+1 {
		t.Errorf("Records: %d (RecordsLen %d, Count %d), want %d records plus the SOA", len(got), z.RecordsLen(), z.Count(), want)
	}
}

// The packed zone is small: under half the ~500 bytes per A record of the map of maps of
// miekg/dns records it replaces (measured as live heap, so the figure does not depend on the
// machine's load).
func TestPackedZoneSize(t *testing.T) {
	const n = 50000
	recs := make([]string, n)
	for i := range recs {
		recs[i] = fmt.Sprintf("h%d A 10.%d.%d.%d", i, i>>16&255, i>>8&255, i&255)
	}
	c := &config.Config{Zones: []config.Zone{{Origin: "z.test.", Records: recs}}}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := live()
	s, err := Build(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	per := float64(live()-before) / n
	t.Logf("%d A records: %.0f bytes each", n, per)
	if per > 200 {
		t.Errorf("the zone holds %.0f bytes per A record, want under 200", per)
	}
	runtime.KeepAlive(s)
	runtime.KeepAlive(recs)
}

// inZone agrees with dns.IsSubDomain, escaped dots included.
func TestInZone(t *testing.T) {
	for _, c := range []struct{ name, origin string }{
		{"z.test.", "z.test."}, {"a.z.test.", "z.test."}, {"az.test.", "z.test."}, {`a\.z.test.`, "z.test."},
		{`a\\.z.test.`, "z.test."}, {"test.", "z.test."}, {"a.b.", "."}, {`x\\\.z.test.`, "z.test."},
	} {
		if got, want := inZone(c.name, c.origin), dns.IsSubDomain(c.origin, c.name); got != want {
			t.Errorf("inZone(%s, %s) = %v, dns.IsSubDomain says %v", c.name, c.origin, got, want)
		}
	}
}

// Diff finds what a reload changed from the packed forms: records added to and removed from a
// set, a TTL change (delete and add), a type and an owner gone, a new owner; never the SOA.
func TestDiff(t *testing.T) {
	mk := func(serial string, recs ...string) *Zone {
		t.Helper()
		s, err := build(t, append([]string{"@ SOA ns1 h " + serial + " 1 1 1 1", "@ NS ns1", "ns1 A 192.0.2.53"}, recs...)...)
		if err != nil {
			t.Fatal(err)
		}
		return s.Find("z.test.")
	}
	old := mk("1", "www A 192.0.2.1", "www A 192.0.2.2", "www TXT t", "mx MX 10 ns1", "gone A 192.0.2.9", "ttl 60 A 192.0.2.3")
	new := mk("2", "www A 192.0.2.1", "www A 192.0.2.4", "mx MX 10 ns1", "fresh AAAA 2001:db8::1", "ttl 120 A 192.0.2.3")
	text := func(rrs []dns.RR) string {
		var s []string
		for _, rr := range rrs {
			s = append(s, strings.Join(strings.Fields(rr.String()), " "))
		}
		return strings.Join(s, "; ")
	}
	del, add := Diff(old, new)
	wantDel := "gone.z.test. 300 IN A 192.0.2.9; ttl.z.test. 60 IN A 192.0.2.3; www.z.test. 300 IN A 192.0.2.2; www.z.test. 300 IN TXT \"t\""
	wantAdd := "fresh.z.test. 300 IN AAAA 2001:db8::1; ttl.z.test. 120 IN A 192.0.2.3; www.z.test. 300 IN A 192.0.2.4"
	if text(del) != wantDel || text(add) != wantAdd {
		t.Errorf("Diff:\n del %s\nwant %s\n add %s\nwant %s", text(del), wantDel, text(add), wantAdd)
	}
	if del, add := Diff(old, old); len(del)+len(add) != 0 {
		t.Errorf("Diff of a zone with itself: %v %v", del, add)
	}
}

// Queries share the unpacked sets: concurrent lookups over more sets than the cache holds (so it
// evicts) get the right records every time (run with -race).
func TestSharedSetsConcurrent(t *testing.T) {
	const n = setCacheEntries + 4000
	recs := make([]string, n)
	for i := range recs {
		recs[i] = fmt.Sprintf("h%d A 10.%d.%d.%d", i, i>>16&255, i>>8&255, i&255)
	}
	s, err := build(t, recs...)
	if err != nil {
		t.Fatal(err)
	}
	z := s.Find("z.test.")
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for k := 0; k < n; k += 3 {
				i := (k + g*7919) % n
				r := z.Lookup(fmt.Sprintf("h%d.z.test.", i), dns.TypeA)
				want := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
				if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != want {
					errs <- fmt.Errorf("h%d: %v, want %s", i, r.Answer, want)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestZoneMaxTTLBound: a key policy's zone_max_ttl bounds the zone's records and dynamic
// names at build and an update's records; the keys are made for the data's largest TTL, names
// included; and an update never lowers it.
func TestZoneMaxTTLBound(t *testing.T) {
	zc := func(limit uint32, recs ...string) *config.Config {
		c := &config.Config{Zones: []config.Zone{{Origin: "z.test.", Records: recs,
			DNSSEC: &config.DNSSEC{KeyDir: "k", DNSKEYTTL: 60, Policy: &config.KeyPolicy{ZoneMaxTTL: limit}},
			Names:  []config.Name{{Name: "app", TTL: 900, Policy: "weighted", Sites: []config.Site{{Name: "a", Weight: 1, Addresses: []string{"192.0.2.9"}}}}}}}}
		c.ApplyDefaults()
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	var seen uint32
	keys := func(_ *config.Zone, maxTTL uint32) ([]dns.RR, error) { seen = maxTTL; return nil, nil }
	if _, err := Build(zc(3600, "www 7200 A 192.0.2.1"), nil, keys); err == nil || !strings.Contains(err.Error(), "TTL 7200 is above dnssec.policy.zone_max_ttl 3600") {
		t.Errorf("record above zone_max_ttl: %v", err)
	}
	if _, err := Build(zc(600), nil, keys); err == nil || !strings.Contains(err.Error(), "name app.z.test.: ttl 900 is above dnssec.policy.zone_max_ttl 600") {
		t.Errorf("name above zone_max_ttl: %v", err)
	}
	s, err := Build(zc(3600, "www 1200 A 192.0.2.1"), nil, keys)
	if err != nil {
		t.Fatal(err)
	}
	z := s.Find("z.test.")
	if seen != 1200 || z.MaxTTL() != 1200 {
		t.Errorf("keys made for %d, MaxTTL %d: want the largest record TTL 1200", seen, z.MaxTTL())
	}
	www, _ := dns.NewRR("www.z.test. 1200 A 192.0.2.1")
	big, _ := dns.NewRR("big.z.test. 7200 A 192.0.2.2")
	if _, err := z.Apply(nil, []dns.RR{big}); err == nil || !strings.Contains(err.Error(), "zone_max_ttl 3600") {
		t.Errorf("update above zone_max_ttl: %v", err)
	}
	nz, err := z.Apply([]dns.RR{www}, nil)
	if err != nil || nz.MaxTTL() != 1200 {
		t.Errorf("after removing the largest TTL's record: %v, MaxTTL %d, want 1200 kept", err, nz.MaxTTL())
	}
	if s, err := Build(zc(0, "www 1200 A 192.0.2.1", "long 99999 TXT x"), nil, keys); err != nil || s.Find("z.test.").MaxTTL() != 99999 {
		t.Errorf("without zone_max_ttl: %v, want any TTL taken and counted", err)
	}
}

// An update's zone carries its owners in canonical order (merged, not sorted again): after a chain
// of updates that add names before, between and after the others, delete a name's last record,
// give an empty non-terminal records and add to an existing name, the carried list is the one a
// sort of the zone's names gives.
func TestApplyCarriesCanonicalOwners(t *testing.T) {
	s, err := build(t, "@ SOA ns1 h 1 1 1 1 1", "@ NS ns1", "ns1 A 192.0.2.53", "m A 192.0.2.1", "x.y.deep A 192.0.2.2", "gone TXT t")
	if err != nil {
		t.Fatal(err)
	}
	z := s.Find("z.test.")
	rr := func(text string) dns.RR {
		r, err := dns.NewRR(text)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	steps := []struct{ del, add []string }{
		{add: []string{"A.z.test. 1 A 192.0.2.10", "zz.z.test. 1 A 192.0.2.11"}},                // first, last (and upper case)
		{add: []string{"n.z.test. 1 A 192.0.2.12", "m.z.test. 1 AAAA 2001:db8::1"}},             // between; an existing name
		{del: []string{"gone.z.test. 1 TXT t"}},                                                 // a name's last record
		{add: []string{"y.deep.z.test. 1 A 192.0.2.13", "*.z.test. 1 TXT w"}},                   // an empty non-terminal; a wildcard
		{del: []string{"m.z.test. 1 A 192.0.2.1"}, add: []string{"b.m.z.test. 1 A 192.0.2.14"}}, // below a name
	}
	for i, st := range steps {
		var del, add []dns.RR
		for _, d := range st.del {
			del = append(del, rr(d))
		}
		for _, a := range st.add {
			add = append(add, rr(a))
		}
		nz, err := z.Apply(del, add)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		carried := fmt.Sprint(nz.owners())
		nz.canon.Store(nil)
		if sorted := fmt.Sprint(nz.owners()); carried != sorted {
			t.Fatalf("step %d: carried owners %s, sorted %s", i, carried, sorted)
		}
		z = nz
	}
	if got, want := fmt.Sprint(z.owners()), "[z.test. *.z.test. a.z.test. y.deep.z.test. x.y.deep.z.test. m.z.test. b.m.z.test. n.z.test. ns1.z.test. zz.z.test.]"; got != want {
		t.Errorf("owners %s, want %s", got, want)
	}
}

// Unchanged follows the copies Apply makes from one another: an answer holds across the changes
// that leave its RRset, the delegations above it and its glue alone, up to recentMax versions
// back; new keys and other zones are another lineage.
func TestUnchangedAcrossApply(t *testing.T) {
	s, err := build(t, "@ SOA ns1 h 1 1 1 1 1", "@ NS ns1", "ns1 A 192.0.2.53", "www A 192.0.2.1", "x.api A 192.0.2.2", "mail A 192.0.2.3")
	if err != nil {
		t.Fatal(err)
	}
	z0 := s.Find("z.test.")
	apply := func(z *Zone, add ...string) *Zone {
		t.Helper()
		var rrs []dns.RR
		for _, a := range add {
			r, err := dns.NewRR(a)
			if err != nil {
				t.Fatal(err)
			}
			rrs = append(rrs, r)
		}
		nz, err := z.Apply(nil, rrs)
		if err != nil {
			t.Fatal(err)
		}
		return nz
	}
	z1 := apply(z0, "new.z.test. 1 A 192.0.2.9")
	z2 := apply(z1, "api.z.test. 1 NS ns1.z.test.")    // a delegation above x.api
	z3 := apply(z2, "mail.z.test. 1 AAAA 2001:db8::3") // mail's addresses: glue of an MX to it
	for _, c := range []struct {
		name        string
		from, to    *Zone
		names       []string
		qtype       uint16
		targets     []string
		unchangedOK bool
	}{
		{"other name", z0, z1, []string{"www.z.test."}, dns.TypeA, nil, true},
		{"the name", z0, z1, []string{"new.z.test."}, dns.TypeA, nil, false},
		{"another type of the name", z0, z1, []string{"new.z.test."}, dns.TypeAAAA, nil, true},
		{"any type of the name", z0, z1, []string{"new.z.test."}, dns.TypeANY, nil, false},
		{"delegation above", z1, z2, []string{"x.api.z.test."}, dns.TypeA, nil, false},
		{"delegation at", z1, z2, []string{"api.z.test."}, dns.TypeA, nil, false},
		{"delegation elsewhere", z1, z2, []string{"www.z.test."}, dns.TypeA, nil, true},
		{"glue changed", z2, z3, []string{"z.test."}, dns.TypeMX, []string{"mail.z.test."}, false},
		{"glue kept", z2, z3, []string{"z.test."}, dns.TypeMX, []string{"ns1.z.test."}, true},
		{"a chain's target changed", z0, z1, []string{"c.z.test.", "new.z.test."}, dns.TypeA, nil, false},
		{"a chain kept", z0, z1, []string{"c.z.test.", "www.z.test."}, dns.TypeA, nil, true},
		{"a chain's target delegated", z1, z2, []string{"c.z.test.", "x.api.z.test."}, dns.TypeA, nil, false},
		{"two versions", z0, z2, []string{"www.z.test."}, dns.TypeA, nil, true},
		{"backwards", z2, z0, []string{"www.z.test."}, dns.TypeA, nil, false},
		{"the same copy", z0, z0, []string{"www.z.test."}, dns.TypeA, nil, true},
	} {
		if got := c.to.Unchanged(c.from, c.names, c.qtype, c.targets); got != c.unchangedOK {
			t.Errorf("%s: Unchanged %v, want %v", c.name, got, c.unchangedOK)
		}
	}
	other, err := build(t, "@ SOA ns1 h 1 1 1 1 1", "@ NS ns1", "ns1 A 192.0.2.53", "www A 192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	if other.Find("z.test.").Unchanged(z0, []string{"www.z.test."}, dns.TypeA, nil) {
		t.Error("a zone built again counts as a descendant of the old copy")
	}
	rk, err := rekey(z1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rk.Unchanged(z1, []string{"www.z.test."}, dns.TypeA, nil) || apply(rk, "n2.z.test. 1 A 192.0.2.8").Unchanged(z1, []string{"www.z.test."}, dns.TypeA, nil) {
		t.Error("answers carried across new keys")
	}
	z := z0
	for i := range recentMax + 1 {
		z = apply(z, fmt.Sprintf("n%d.z.test. 1 A 192.0.2.7", i))
	}
	if z.Unchanged(z0, []string{"www.z.test."}, dns.TypeA, nil) {
		t.Errorf("an answer %d versions back judged unchanged; a copy remembers %d", recentMax+1, recentMax)
	}
	if !z.Unchanged(z1, []string{"www.z.test."}, dns.TypeA, nil) {
		t.Errorf("an answer %d versions back judged changed; a copy remembers %d", recentMax, recentMax)
	}
}
