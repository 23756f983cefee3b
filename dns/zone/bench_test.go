package zone

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// BenchmarkLookup measures a lookup's cost in a 10k-name zone (the answer cache's misses pay
// it): an exact name, a CNAME to it, a wildcard, a name that does not exist and a referral.
func BenchmarkLookup(b *testing.B) {
	recs := []string{"alias CNAME h42", "*.wild A 192.0.2.1", "sub NS ns.sub", "ns.sub A 192.0.2.2"}
	for i := range 10000 {
		recs = append(recs, fmt.Sprintf("h%d A 10.0.%d.%d", i, i>>8&255, i&255))
	}
	s, err := buildZones(b, config.Zone{Origin: "z.test.", Records: recs})
	if err != nil {
		b.Fatal(err)
	}
	z := s.Find("z.test.")
	for _, q := range []struct{ name, qname string }{{"exact", "h42.z.test."}, {"cname", "alias.z.test."},
		{"wildcard", "x.wild.z.test."}, {"nxdomain", "nope.z.test."}, {"referral", "www.sub.z.test."}} {
		b.Run(q.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if r := z.Lookup(q.qname, dns.TypeA); len(r.Answer)+len(r.Ns) == 0 {
					b.Fatal("empty answer")
				}
			}
		})
	}
}

// BenchmarkBuild measures the build of a 100,000-record zone: the parse, the checks and the
// packing a reload of a changed zone pays.
func BenchmarkBuild(b *testing.B) {
	recs := make([]string, 100000)
	for i := range recs {
		recs[i] = fmt.Sprintf("h%d A 10.%d.%d.%d", i, i>>16&255, i>>8&255, i&255)
	}
	c := &config.Config{Zones: []config.Zone{{Origin: "z.test.", Records: recs}}}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Build(c, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}
