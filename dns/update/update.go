// Package update holds the semantics of RFC 2136 dynamic updates to one zone: the prerequisite
// section (3.2), the permission check against the zone's allow-list (3.3), the prescan and the
// update section (3.4: add, delete an RRset, delete every RRset of a name, delete a record; the
// SOA and the apex NS set kept), the serial raised in RFC 1982 arithmetic, and the journal file
// the applied changes are appended to and replayed from. It decides; the DNS server checks the
// TSIG, swaps the changed zone in and answers.
package update

import (
	"fmt"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// Zone is what an update reads of the zone it changes (zone.Zone): the records as stored,
// without wildcard synthesis.
type Zone interface {
	RRset(name string, t uint16) []dns.RR
	TypesAt(name string) []uint16
	IsDynamic(name string) bool
}

// Policy is what the zone's configuration says of updates to it.
type Policy struct {
	// Origin is the zone apex, lowercased and absolute.
	Origin string
	// Rules is the zone's allow-list.
	Rules []config.UpdateRule
	// Key is the wire name of the TSIG key that signed the update ("" for none).
	Key string
	// Signed is set for an online-signed zone, whose DNSSEC records the server makes itself.
	Signed bool
}

// Change is an applied update: the records deleted and added, the SOA among them when the
// serial moved (the old one deleted, the new one added), as an IXFR step and a journal entry
// carry it.
type Change struct {
	From, To uint32
	Del, Add []dns.RR
}

// Refusal is an update that changes nothing: the rcode to answer and why, for the log.
type Refusal struct {
	Rcode  int
	Reason string
}

func (r *Refusal) Error() string { return dns.RcodeToString[r.Rcode] + ": " + r.Reason }

func refuse(rcode int, format string, a ...any) *Refusal {
	return &Refusal{Rcode: rcode, Reason: fmt.Sprintf(format, a...)}
}

// Process checks the update req (opcode UPDATE, its zone section already matched to the zone
// z with SOA soa) and computes its change. A nil change with a nil refusal means the update was
// accepted and changes nothing (no serial bump, RFC 2136 3.7).
func Process(z Zone, soa *dns.SOA, req *dns.Msg, p Policy) (*Change, *Refusal) {
	if r := checkPrereqs(z, req.Answer, p.Origin); r != nil {
		return nil, r
	}
	if r := checkUpdates(z, req.Ns, p); r != nil {
		return nil, r
	}
	w := &work{z: z, origin: p.Origin, signed: p.Signed, sets: map[setKey][]dns.RR{}}
	w.sets[setKey{p.Origin, dns.TypeSOA}] = []dns.RR{soa}
	for _, rr := range req.Ns {
		w.apply(rr)
	}
	return w.change(soa), nil
}

// inZone reports whether the lowercased name is the origin or below it.
func inZone(name, origin string) bool { return dns.IsSubDomain(origin, name) }

// maintained are the types an online-signed zone makes itself: updates may not touch them.
var maintained = map[uint16]bool{dns.TypeDNSKEY: true, dns.TypeRRSIG: true, dns.TypeNSEC: true,
	dns.TypeNSEC3: true, dns.TypeNSEC3PARAM: true}

// meta are the types that are never records (RFC 2136 3.4.1.3, RFC 6895).
var meta = map[uint16]bool{dns.TypeANY: true, dns.TypeAXFR: true, dns.TypeIXFR: true, dns.TypeMAILA: true,
	dns.TypeMAILB: true, dns.TypeOPT: true, dns.TypeTSIG: true, dns.TypeTKEY: true, dns.TypeNone: true}

// checkPrereqs evaluates the prerequisite section (RFC 2136 3.2) on the zone as it is.
func checkPrereqs(z Zone, rrs []dns.RR, origin string) *Refusal {
	type group struct {
		name string
		t    uint16
		rrs  []dns.RR
	}
	var valued []*group // value-dependent "RRset exists" prerequisites, by name and type
	for _, rr := range rrs {
		h := rr.Header()
		name := strings.ToLower(h.Name)
		if !inZone(name, origin) {
			return refuse(dns.RcodeNotZone, "prerequisite %s is outside the zone %s", h.Name, origin)
		}
		if h.Ttl != 0 {
			return refuse(dns.RcodeFormatError, "prerequisite %s has TTL %d; prerequisites carry TTL 0", h.Name, h.Ttl)
		}
		inUse := len(z.TypesAt(name)) > 0 || z.IsDynamic(name)
		switch h.Class {
		case dns.ClassANY, dns.ClassNONE:
			if h.Rdlength != 0 {
				return refuse(dns.RcodeFormatError, "prerequisite %s of class %s carries data", h.Name, dns.ClassToString[h.Class])
			}
			exists := inUse
			if h.Rrtype != dns.TypeANY {
				exists = len(z.RRset(name, h.Rrtype)) > 0
			}
			switch {
			case h.Class == dns.ClassANY && !exists && h.Rrtype == dns.TypeANY:
				return refuse(dns.RcodeNameError, "prerequisite: name %s is not in use", name)
			case h.Class == dns.ClassANY && !exists:
				return refuse(dns.RcodeNXRrset, "prerequisite: no %s RRset at %s", dns.TypeToString[h.Rrtype], name)
			case h.Class == dns.ClassNONE && exists && h.Rrtype == dns.TypeANY:
				return refuse(dns.RcodeYXDomain, "prerequisite: name %s is in use", name)
			case h.Class == dns.ClassNONE && exists:
				return refuse(dns.RcodeYXRrset, "prerequisite: an %s RRset exists at %s", dns.TypeToString[h.Rrtype], name)
			}
		case dns.ClassINET:
			if meta[h.Rrtype] {
				return refuse(dns.RcodeFormatError, "prerequisite %s: type %s has no records", h.Name, dns.TypeToString[h.Rrtype])
			}
			i := slices.IndexFunc(valued, func(g *group) bool { return g.name == name && g.t == h.Rrtype })
			if i < 0 {
				valued = append(valued, &group{name: name, t: h.Rrtype})
				i = len(valued) - 1
			}
			valued[i].rrs = append(valued[i].rrs, rr)
		default:
			return refuse(dns.RcodeFormatError, "prerequisite %s: class %s is not one of IN, ANY, NONE", h.Name, dns.ClassToString[h.Class])
		}
	}
	for _, g := range valued {
		if !sameRecords(z.RRset(g.name, g.t), g.rrs) {
			return refuse(dns.RcodeNXRrset, "prerequisite: the %s RRset at %s is not the one given", dns.TypeToString[g.t], g.name)
		}
	}
	return nil
}

// sameRecords reports whether a and b hold the same records (as dns.IsDuplicate compares; the
// TTL is not compared), duplicates counted once.
func sameRecords(a, b []dns.RR) bool {
	has := func(set []dns.RR, rr dns.RR) bool {
		return slices.ContainsFunc(set, func(x dns.RR) bool { return dns.IsDuplicate(x, rr) })
	}
	for _, rr := range a {
		if !has(b, rr) {
			return false
		}
	}
	for _, rr := range b {
		if !has(a, rr) {
			return false
		}
	}
	return true
}

// checkUpdates prescans the update section (RFC 2136 3.4.1: every record inside the zone and
// well formed) and checks each record against the allow-list (3.3) before anything is applied.
func checkUpdates(z Zone, rrs []dns.RR, p Policy) *Refusal {
	for _, rr := range rrs {
		h := rr.Header()
		name := strings.ToLower(h.Name)
		if !inZone(name, p.Origin) {
			return refuse(dns.RcodeNotZone, "%s is outside the zone %s", h.Name, p.Origin)
		}
		switch h.Class {
		case dns.ClassINET:
			if meta[h.Rrtype] || h.Rdlength == 0 {
				return refuse(dns.RcodeFormatError, "add %s %s: not a record with data", h.Name, dns.TypeToString[h.Rrtype])
			}
		case dns.ClassANY:
			if h.Ttl != 0 || h.Rdlength != 0 || meta[h.Rrtype] && h.Rrtype != dns.TypeANY {
				return refuse(dns.RcodeFormatError, "delete %s %s: an RRset delete carries TTL 0, no data and a record type or ANY", h.Name, dns.TypeToString[h.Rrtype])
			}
		case dns.ClassNONE:
			if h.Ttl != 0 || meta[h.Rrtype] {
				return refuse(dns.RcodeFormatError, "delete %s %s: a record delete carries TTL 0 and a record type", h.Name, dns.TypeToString[h.Rrtype])
			}
		default:
			return refuse(dns.RcodeFormatError, "%s: class %s is not one of IN, ANY, NONE", h.Name, dns.ClassToString[h.Class])
		}
		if r := permitted(z, name, h.Rrtype, p); r != nil {
			return r
		}
	}
	return nil
}

// permitted checks one update record against the allow-list: a rule of the signing key must
// cover the name and type (for a delete of every RRset of a name, every type the name has).
func permitted(z Zone, name string, t uint16, p Policy) *Refusal {
	if p.Key == "" {
		return refuse(dns.RcodeRefused, "the update is not signed; sign it with a TSIG key the zone's update.allow names")
	}
	if z.IsDynamic(name) {
		return refuse(dns.RcodeRefused, "%s is a dynamic name answered by its routing policy; change it in the configuration", name)
	}
	if p.Signed && maintained[t] {
		return refuse(dns.RcodeRefused, "%s %s: the zone is signed online and makes its own DNSSEC records", name, dns.TypeToString[t])
	}
	types := []uint16{t}
	if t == dns.TypeANY {
		types = z.TypesAt(name)
	}
	for _, x := range types {
		if t == dns.TypeANY && kept(name, x, p.Origin, p.Signed) {
			continue // a delete of every RRset leaves it: nothing to permit
		}
		ok := slices.ContainsFunc(p.Rules, func(r config.UpdateRule) bool {
			return config.KeyName(r.Key) == p.Key && r.Allows(name, x)
		})
		if !ok {
			return refuse(dns.RcodeRefused, "key %s may not change %s %s (update.allow)", p.Key, name, dns.TypeToString[x])
		}
	}
	return nil
}
