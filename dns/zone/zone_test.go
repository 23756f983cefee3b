package zone

import (
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

func build(t *testing.T, records ...string) (*Store, error) {
	t.Helper()
	c := &config.Config{Zones: []config.Zone{{Origin: "z.test.", Records: records}}}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
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
