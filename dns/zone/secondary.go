package zone

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// FromRecords builds the zone origin from the records of a full transfer (the SOA among
// them), checked as a zone file's are. A secondary zone is built this way, or by Read from
// its saved copy; it has no dynamic names and no online signer.
func FromRecords(origin string, rrs []dns.RR) (*Zone, error) {
	z := &Zone{Origin: origin, id: zoneIDs.Add(1)}
	b := newBuilder(z, nil)
	for _, rr := range rrs {
		if err := b.add(dns.Copy(rr)); err != nil {
			return nil, err
		}
	}
	return b.complete()
}

// Read builds the zone origin from zone-file text (a secondary zone's saved copy, WriteText's
// output); name names the source in errors.
func Read(origin string, r io.Reader, name string) (*Zone, error) {
	z := &Zone{Origin: origin, id: zoneIDs.Add(1)}
	b := newBuilder(z, nil)
	if err := parse(r, origin, name, 3600, b.add); err != nil {
		return nil, err
	}
	return b.complete()
}

// complete finishes a zone whose data came whole from elsewhere: it must have its SOA and apex
// NS set (none is made up, unlike a configured zone's).
func (b *builder) complete() (*Zone, error) {
	switch {
	case b.z.SOA == nil:
		return nil, errors.New("the zone has no SOA record")
	case !b.apexNS:
		return nil, errors.New("the zone has no NS records at its apex")
	}
	if err := b.apex(&config.Zone{Origin: b.z.Origin}, nil); err != nil {
		return nil, err
	}
	if err := b.finish(); err != nil {
		return nil, err
	}
	return b.z, nil
}

// WriteText writes the zone as zone-file text: the SOA first, then every other record (the
// DNSKEYs too, unlike Records) in canonical order. Read reads it back.
func (z *Zone) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "%s\n", z.SOA.String())
	for _, name := range z.owners() {
		n, _ := z.node(name)
		n.each(func(s rrset) bool {
			if s.rrtype != dns.TypeSOA {
				for _, rr := range sortedText(s.rrs(name)) {
					fmt.Fprintf(bw, "%s\n", rr.String())
				}
			}
			return true
		})
	}
	return bw.Flush()
}

// Get returns the zone whose origin is exactly origin, or nil (Find looks up by suffix).
func (s *Store) Get(origin string) *Zone { return s.zones[origin] }

// Without returns a store holding s's zones but the one of origin; s is not changed.
func (s *Store) Without(origin string) *Store {
	out := &Store{zones: make(map[string]*Zone, len(s.zones))}
	for k, v := range s.zones {
		if k != origin {
			out.zones[k] = v
		}
	}
	return out
}
