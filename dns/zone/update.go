package zone

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// RRset returns the records of type t owned by the lowercased name itself (no wildcard, no
// CNAME), unpacked for the caller; nil when there are none. Dynamic updates read the zone
// through it (RFC 2136 prerequisites compare RRsets as they are stored).
func (z *Zone) RRset(name string, t uint16) []dns.RR {
	n, _ := z.node(name)
	s, ok := n.set(t)
	if !ok {
		return nil
	}
	return s.rrs(name)
}

// TypesAt returns the sorted types of the records the lowercased name owns itself (no
// wildcard); nil for an empty non-terminal, a missing name or a dynamic name.
func (z *Zone) TypesAt(name string) []uint16 {
	n, _ := z.node(name)
	if !n.exists() {
		return nil
	}
	return n.types()
}

// Apply returns a new zone: z's records without those of del (matched as dns.IsDuplicate
// matches, whatever their TTL) and with those of add, checked as a zone file's are (CNAME
// beside other data, an SOA outside the apex, two SOAs). The SOA changes by deleting the old
// one and adding the new one. z is not changed: the caller swaps the new zone in. The new zone
// keeps z's source, so a reload of an unchanged file carries it over as it is.
func (z *Zone) Apply(del, add []dns.RR) (*Zone, error) {
	nz := &Zone{Origin: z.Origin, id: zoneIDs.Add(1), dynamic: z.dynamic, source: z.source, keys: z.keys, limit: z.limit}
	b := newBuilder(nz, z)
	gone := map[string][]dns.RR{} // by owner and type
	for _, rr := range del {
		h := rr.Header()
		k := setKey(h.Name, h.Rrtype)
		gone[k] = append(gone[k], rr)
	}
	soaKept := true
	for _, name := range z.owners() {
		n, _ := z.node(name)
		var err error
		n.each(func(s rrset) bool {
			dels := gone[setKey(name, s.rrtype)]
			if len(dels) == 0 {
				err = b.stageSet(name, s)
				return err == nil
			}
			for _, rr := range s.rrs(name) {
				if isIn(rr, dels) {
					soaKept = soaKept && s.rrtype != dns.TypeSOA
					continue
				}
				if err = b.add(rr); err != nil {
					return false
				}
			}
			return true
		})
		if err != nil {
			return nil, err
		}
	}
	if soaKept {
		nz.SOA = z.SOA
	}
	for _, rr := range add {
		if err := b.add(dns.Copy(rr)); err != nil {
			return nil, err
		}
	}
	if nz.SOA == nil {
		return nil, errors.New("the change leaves the zone without an SOA record")
	}
	if !b.hasSet(nz.Origin, dns.TypeNS) {
		return nil, errors.New("the change leaves the apex without NS records")
	}
	// Never lower: a removed record's signatures stay in caches for its TTL.
	nz.maxTTL = max(z.maxTTL, b.maxTTL())
	if err := b.finish(); err != nil {
		return nil, err
	}
	return nz, nil
}

// hasSet reports whether records of type t at name are staged (Apply's apex check).
func (b *builder) hasSet(name string, t uint16) bool {
	id, ok := b.owners[name]
	return ok && slices.ContainsFunc(b.recs, func(r staged) bool { return r.owner == id && r.rrtype == t })
}

// stageSet stages a packed RRset of an existing zone as it is: its records were checked when
// that zone was built, so only the owner's flags are set again.
func (b *builder) stageSet(name string, s rrset) error {
	id := b.owner(name)
	switch s.rrtype {
	case dns.TypeCNAME:
		b.flags[id] |= ownHasCNAME
	case dns.TypeNS:
		if name != b.z.Origin {
			b.flags[id] |= ownIsCut
		} else {
			b.apexNS = true
		}
	}
	b.flags[id] |= ownHasData
	var err error
	s.eachRdata(func(rd []byte) {
		if len(b.rdata)+len(rd) > 1<<32-2 {
			err = errors.New("zone data over 4 GiB; split the zone")
			return
		}
		b.recs = append(b.recs, staged{owner: id, off: uint32(len(b.rdata)), ttl: s.ttl, rrtype: s.rrtype, n: uint16(len(rd))})
		b.rdata = append(b.rdata, rd...)
	})
	return err
}

// setKey names an RRset: lowercased owner and type.
func setKey(name string, t uint16) string { return fmt.Sprintf("%s/%d", strings.ToLower(name), t) }

// isIn reports whether rr is one of rrs, as dns.IsDuplicate compares (owner, class, type and
// rdata; not the TTL).
func isIn(rr dns.RR, rrs []dns.RR) bool {
	for _, x := range rrs {
		if dns.IsDuplicate(rr, x) {
			return true
		}
	}
	return false
}

// With returns a store holding s's zones with each of zs in place of the zone of its origin;
// s is not changed (queries in flight keep reading it).
func (s *Store) With(zs ...*Zone) *Store {
	out := &Store{zones: make(map[string]*Zone, len(s.zones)+len(zs))}
	for k, v := range s.zones {
		out.zones[k] = v
	}
	for _, z := range zs {
		out.zones[z.Origin] = z
	}
	return out
}
