package zone

import (
	"errors"
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
	gone := map[setID][]dns.RR{}
	for _, rr := range del {
		h := rr.Header()
		k := setID{strings.ToLower(h.Name), h.Rrtype}
		gone[k] = append(gone[k], rr)
	}
	soaKept := true
	for _, name := range z.owners() {
		n, _ := z.node(name)
		var err error
		n.each(func(s rrset) bool {
			dels := gone[setID{name, s.rrtype}]
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
	nz.carryOwners(z, add)
	nz.descend(z, del, add)
	return nz, nil
}

// carryOwners gives nz, z changed by an update that added add, its owners in canonical order
// without sorting them: z's that nz still has, merged with the few add brought. A burst of
// updates otherwise sorted the whole zone once per update (a third of an update's CPU).
func (nz *Zone) carryOwners(z *Zone, add []dns.RR) {
	var fresh []string
	for _, rr := range add {
		name := strings.ToLower(rr.Header().Name)
		if !z.owns(name) && nz.owns(name) && !slices.Contains(fresh, name) {
			fresh = append(fresh, name)
		}
	}
	slices.SortFunc(fresh, canonicalCompare)
	old := z.owners()
	names := make([]string, 0, len(old)+len(fresh))
	for _, name := range old {
		for len(fresh) > 0 && canonicalCompare(fresh[0], name) < 0 {
			names, fresh = append(names, fresh[0]), fresh[1:]
		}
		if nz.owns(name) {
			names = append(names, name)
		}
	}
	names = append(names, fresh...)
	nz.canon.Store(&names)
}

// owns reports whether the lowercased name has records of its own (not an empty non-terminal).
func (z *Zone) owns(name string) bool {
	off, ok := z.index.get(name)
	return ok && off != entMark
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

// setID names an RRset: lowercased owner and type.
type setID struct {
	name string
	t    uint16
}

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
