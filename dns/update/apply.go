package update

import (
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/internal/wire"
)

// work is the zone as the update section changes it, record by record (RFC 2136 3.4.2: each
// record applies to the result of the ones before): the RRsets touched so far over the zone.
type work struct {
	z      Zone
	origin string
	signed bool
	sets   map[setKey][]dns.RR // touched RRsets; an empty one was deleted
	order  []setKey            // touched RRsets in the order first touched
}

type setKey struct {
	name string
	t    uint16
}

// get returns the RRset as it stands now.
func (w *work) get(name string, t uint16) []dns.RR {
	if s, ok := w.sets[setKey{name, t}]; ok {
		return s
	}
	return w.z.RRset(name, t)
}

// put replaces the RRset.
func (w *work) put(name string, t uint16, rrs []dns.RR) {
	k := setKey{name, t}
	if _, ok := w.sets[k]; !ok {
		w.order = append(w.order, k)
	}
	w.sets[k] = rrs
}

// types returns the types the name has now.
func (w *work) types(name string) []uint16 {
	var out []uint16
	for _, t := range w.z.TypesAt(name) {
		if _, touched := w.sets[setKey{name, t}]; !touched {
			out = append(out, t)
		}
	}
	for k, s := range w.sets {
		if k.name == name && len(s) > 0 {
			out = append(out, k.t)
		}
	}
	slices.Sort(out)
	return out
}

// kept reports whether a delete of every RRset at name leaves type t (RFC 2136 3.4.2.3: the
// apex keeps its SOA and NS; an online-signed zone keeps the DNSKEYs it publishes).
func kept(name string, t uint16, origin string, signed bool) bool {
	return name == origin && (t == dns.TypeSOA || t == dns.TypeNS) || signed && maintained[t]
}

// apply applies one record of the update section (prescanned by checkUpdates).
func (w *work) apply(rr dns.RR) {
	h := rr.Header()
	name := strings.ToLower(h.Name)
	switch {
	case h.Class == dns.ClassINET:
		w.add(name, rr)
	case h.Class == dns.ClassANY && h.Rrtype == dns.TypeANY:
		for _, t := range w.types(name) {
			if !kept(name, t, w.origin, w.signed) {
				w.put(name, t, nil)
			}
		}
	case h.Class == dns.ClassANY:
		if !kept(name, h.Rrtype, w.origin, false) {
			w.put(name, h.Rrtype, nil)
		}
	case h.Class == dns.ClassNONE:
		w.deleteRecord(name, rr)
	}
}

// add adds rr (RFC 2136 3.4.2.2): a newer SOA replaces the SOA, a CNAME replaces a CNAME and is
// ignored beside other data (as other data is beside a CNAME), a record already present is not
// added twice, and the RRset takes the added record's TTL (one TTL per RRset, RFC 2181 5.2).
func (w *work) add(name string, rr dns.RR) {
	rr = dns.Copy(rr)
	rr.Header().Name = name
	t := rr.Header().Rrtype
	types := w.types(name)
	switch {
	case t == dns.TypeSOA:
		cur := w.get(w.origin, dns.TypeSOA)[0].(*dns.SOA)
		if name == w.origin && wire.SerialLess(cur.Serial, rr.(*dns.SOA).Serial) {
			w.put(name, t, []dns.RR{rr})
		}
		return
	case t == dns.TypeCNAME:
		if slices.ContainsFunc(types, func(x uint16) bool { return x != dns.TypeCNAME }) {
			return
		}
		w.put(name, t, []dns.RR{rr})
		return
	case slices.Contains(types, dns.TypeCNAME):
		return
	}
	cur := w.get(name, t)
	set := make([]dns.RR, 0, len(cur)+1)
	for _, x := range cur {
		x = dns.Copy(x)
		x.Header().Ttl = rr.Header().Ttl
		if !dns.IsDuplicate(x, rr) {
			set = append(set, x)
		}
	}
	w.put(name, t, append(set, rr))
}

// deleteRecord deletes one record (RFC 2136 3.4.2.4): never the SOA, never the last apex NS.
func (w *work) deleteRecord(name string, rr dns.RR) {
	t := rr.Header().Rrtype
	if t == dns.TypeSOA {
		return
	}
	target := dns.Copy(rr)
	target.Header().Class = dns.ClassINET
	cur := w.get(name, t)
	set := slices.DeleteFunc(slices.Clone(cur), func(x dns.RR) bool { return dns.IsDuplicate(x, target) })
	if len(set) == len(cur) || name == w.origin && t == dns.TypeNS && len(set) == 0 {
		return
	}
	w.put(name, t, set)
}

// change compares the touched RRsets with the zone and returns the change, the SOA replaced by
// one with a higher serial unless the update raised it itself; nil when nothing changed.
func (w *work) change(soa *dns.SOA) *Change {
	c := &Change{From: soa.Serial}
	for _, k := range w.order {
		if k.t == dns.TypeSOA {
			continue
		}
		del, add := diffSet(w.z.RRset(k.name, k.t), w.sets[k])
		c.Del, c.Add = append(c.Del, del...), append(c.Add, add...)
	}
	next := w.get(w.origin, dns.TypeSOA)[0].(*dns.SOA)
	if len(c.Del) == 0 && len(c.Add) == 0 && next == soa {
		return nil
	}
	if next == soa {
		next = dns.Copy(soa).(*dns.SOA)
		next.Serial = nextSerial(soa.Serial)
	}
	c.To = next.Serial
	c.Del = append([]dns.RR{soa}, c.Del...)
	c.Add = append([]dns.RR{next}, c.Add...)
	return c
}

// diffSet returns the records of old missing from new and those of new missing from old; when
// the TTL changed, all of both (an IXFR step carries records whole).
func diffSet(old, new []dns.RR) (del, add []dns.RR) {
	if len(old) > 0 && len(new) > 0 && old[0].Header().Ttl != new[0].Header().Ttl {
		return old, new
	}
	for _, rr := range old {
		if !slices.ContainsFunc(new, func(x dns.RR) bool { return dns.IsDuplicate(x, rr) }) {
			del = append(del, rr)
		}
	}
	for _, rr := range new {
		if !slices.ContainsFunc(old, func(x dns.RR) bool { return dns.IsDuplicate(x, rr) }) {
			add = append(add, rr)
		}
	}
	return del, add
}

// nextSerial is the serial after s in RFC 1982 arithmetic; 0 is skipped, as BIND and Knot
// skip it, since some secondaries treat it as unset.
func nextSerial(s uint32) uint32 {
	if s+1 == 0 {
		return 1
	}
	return s + 1
}
