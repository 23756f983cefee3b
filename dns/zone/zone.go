// Package zone holds the static data of the zones the DNS stop is authoritative for and answers
// lookups on it: exact matches, CNAME chains inside the zone, delegations, NODATA and NXDOMAIN
// with the SOA for negative caching. It is immutable once built, so the server swaps whole
// stores on reload and in-flight queries keep the store they started with.
package zone

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// Zone is one zone of authority.
type Zone struct {
	// Origin is the lowercased, fully qualified apex.
	Origin string
	// SOA is the zone's start of authority.
	SOA *dns.SOA
	// nodes maps a lowercased owner name to its RRsets by type.
	nodes map[string]map[uint16][]dns.RR
	// ents are empty non-terminals: names with no records but with descendants, which answer
	// NODATA rather than NXDOMAIN (RFC 8020).
	ents map[string]bool
	// dynamic marks owners answered by a routing policy; they exist for NODATA purposes.
	dynamic map[string]bool
	// cuts are delegation points below the apex (owners with NS records).
	cuts map[string]bool
	// source is the hash of what the zone was built from (Build carries it over when unchanged).
	source source
}

// Store is the set of zones, looked up by longest suffix.
type Store struct {
	zones map[string]*Zone
}

// Kind says what a lookup found.
type Kind int

const (
	// Answer means Answer holds the records asked for (possibly after CNAMEs).
	Answer Kind = iota
	// NoData means the name exists but has no record of the type.
	NoData
	// NXDomain means the name does not exist.
	NXDomain
	// Referral means the name is at or below a delegation; Ns holds the NS set.
	Referral
	// Dynamic means the name (possibly the target of a CNAME chain) is a dynamic service name;
	// DynamicName holds it and Answer holds the CNAMEs that led there.
	Dynamic
)

// Result is the outcome of a lookup.
type Result struct {
	Kind        Kind
	Answer      []dns.RR
	Ns          []dns.RR
	Extra       []dns.RR
	DynamicName string
}

// Build parses the static records of every zone of c; keys are the DNSKEY RRsets of the
// online-signed zones, by origin. A zone built from the same source as the one of the same
// origin in prev (configuration, zone file content and DNSKEYs unchanged) is taken from prev as
// it is, the same *Zone, instead of being parsed again: a reload of many zones where one changed
// costs the memory and time of that one. prev may be nil.
func Build(c *config.Config, prev *Store, keys map[string][]dns.RR) (*Store, error) {
	s := &Store{zones: map[string]*Zone{}}
	for i := range c.Zones {
		zc := &c.Zones[i]
		if z := carried(prev, zc, c.Dir, keys[zc.Origin]); z != nil {
			s.zones[z.Origin] = z
			continue
		}
		z, err := buildZone(zc, c.Dir, keys[zc.Origin])
		if err != nil {
			if zc.Line > 0 {
				return nil, fmt.Errorf("line %d: zone %s: %w", zc.Line, zc.Origin, err)
			}
			return nil, fmt.Errorf("zone %s: %w", zc.Origin, err)
		}
		s.zones[z.Origin] = z
	}
	return s, nil
}

// Zones returns the zones sorted by origin.
func (s *Store) Zones() []*Zone {
	out := make([]*Zone, 0, len(s.zones))
	for _, z := range s.zones {
		out = append(out, z)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Origin < out[j].Origin })
	return out
}

// Find returns the zone with the longest origin that is a suffix of the lowercased qname, or nil
// when the server is not authoritative (the caller answers REFUSED: no recursion).
func (s *Store) Find(qname string) *Zone {
	name := qname
	for {
		if z, ok := s.zones[name]; ok {
			return z
		}
		if name == "." {
			return nil
		}
		i := strings.IndexByte(name, '.')
		if i < 0 || i == len(name)-1 {
			name = "."
		} else {
			name = name[i+1:]
		}
	}
}

func buildZone(zc *config.Zone, dir string, keys []dns.RR) (*Zone, error) {
	z := &Zone{
		Origin:  zc.Origin,
		nodes:   map[string]map[uint16][]dns.RR{},
		ents:    map[string]bool{},
		dynamic: map[string]bool{},
		cuts:    map[string]bool{},
	}
	var rrs []dns.RR
	h := hashConfig(zc, dir, keys)
	if zc.File != "" {
		path := zonePath(zc, dir)
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("open zone file: %w", err)
		}
		defer f.Close()
		// The source hash covers exactly the bytes parsed, so a file rewritten during the
		// build is seen as changed by the next reload.
		tee := io.TeeReader(f, h)
		got, err := parse(tee, zc.Origin, path, zc.TTL)
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(io.Discard, tee); err != nil {
			return nil, fmt.Errorf("read zone file: %w", err)
		}
		rrs = append(rrs, got...)
	}
	h.Sum(z.source[:0])
	if len(zc.Records) > 0 {
		got, err := parse(strings.NewReader(strings.Join(zc.Records, "\n")+"\n"), zc.Origin, "records", zc.TTL)
		if err != nil {
			return nil, err
		}
		rrs = append(rrs, got...)
	}
	for _, rr := range rrs {
		if err := z.add(rr); err != nil {
			return nil, err
		}
	}
	if z.SOA == nil {
		z.SOA = defaultSOA(zc)
		z.nodes[z.Origin] = ensure(z.nodes[z.Origin])
		z.nodes[z.Origin][dns.TypeSOA] = []dns.RR{z.SOA}
	}
	if len(z.nodes[z.Origin][dns.TypeNS]) == 0 {
		// An authoritative zone needs an apex NS set; derive it from the SOA's primary name.
		z.nodes[z.Origin][dns.TypeNS] = []dns.RR{&dns.NS{
			Hdr: dns.RR_Header{Name: z.Origin, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: z.SOA.Hdr.Ttl},
			Ns:  z.SOA.Ns,
		}}
	}
	for _, n := range zc.Names {
		if _, clash := z.nodes[n.Name]; clash {
			return nil, fmt.Errorf("dynamic name %s also has static records; remove one of them", n.Name)
		}
		z.dynamic[n.Name] = true
	}
	if zc.DNSSEC != nil {
		if err := z.checkUnsigned(); err != nil {
			return nil, err
		}
		// The online signer's DNSKEY RRset; zone transfers leave it out (Records).
		if len(keys) > 0 {
			z.nodes[z.Origin][dns.TypeDNSKEY] = keys
		}
	}
	for owner := range z.nodes {
		z.markParents(owner)
	}
	for owner := range z.dynamic {
		z.markParents(owner)
	}
	return z, nil
}

func ensure(m map[uint16][]dns.RR) map[uint16][]dns.RR {
	if m == nil {
		return map[uint16][]dns.RR{}
	}
	return m
}

func defaultSOA(zc *config.Zone) *dns.SOA {
	s := config.SOA{NS: "ns1." + zc.Origin, Mbox: "hostmaster." + zc.Origin, Serial: 1,
		Refresh: 3600, Retry: 600, Expire: 604800, Minimum: 60}
	if zc.SOA != nil {
		c := *zc.SOA
		if c.NS != "" {
			s.NS = config.Absolute(c.NS, zc.Origin)
		}
		if c.Mbox != "" {
			s.Mbox = config.Absolute(c.Mbox, zc.Origin)
		}
		for _, p := range []struct {
			dst *uint32
			v   uint32
		}{{&s.Serial, c.Serial}, {&s.Refresh, c.Refresh},
			{&s.Retry, c.Retry}, {&s.Expire, c.Expire}, {&s.Minimum, c.Minimum}} {
			if p.v != 0 {
				*p.dst = p.v
			}
		}
	}
	return &dns.SOA{
		Hdr: dns.RR_Header{Name: zc.Origin, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: zc.TTL},
		Ns:  s.NS, Mbox: s.Mbox, Serial: s.Serial, Refresh: s.Refresh, Retry: s.Retry,
		Expire: s.Expire, Minttl: s.Minimum,
	}
}

func parse(r interface{ Read([]byte) (int, error) }, origin, file string, ttl uint32) ([]dns.RR, error) {
	zp := dns.NewZoneParser(r, origin, file)
	zp.SetDefaultTTL(ttl)
	// $INCLUDE would let a zone file read arbitrary files; zones come from the operator's config.
	zp.SetIncludeAllowed(false)
	var out []dns.RR
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		out = append(out, rr)
	}
	if err := zp.Err(); err != nil {
		return nil, fmt.Errorf("parse records: %w", err)
	}
	return out, nil
}

func (z *Zone) add(rr dns.RR) error {
	h := rr.Header()
	h.Name = strings.ToLower(h.Name)
	if h.Class != dns.ClassINET {
		return fmt.Errorf("record %q: class %s is not served; use IN", rr.String(), dns.ClassToString[h.Class])
	}
	if !dns.IsSubDomain(z.Origin, h.Name) {
		return fmt.Errorf("record %q: owner %s is outside the zone %s", rr.String(), h.Name, z.Origin)
	}
	node := ensure(z.nodes[h.Name])
	z.nodes[h.Name] = node
	switch h.Rrtype {
	case dns.TypeSOA:
		if h.Name != z.Origin {
			return fmt.Errorf("record %q: SOA must be at the apex %s", rr.String(), z.Origin)
		}
		if z.SOA != nil {
			return errors.New("two SOA records; a zone has exactly one")
		}
		z.SOA = rr.(*dns.SOA)
	case dns.TypeCNAME:
		if len(node) > 0 {
			return fmt.Errorf("record %q: a CNAME cannot coexist with other data at %s (RFC 1034 3.6.2)", rr.String(), h.Name)
		}
	case dns.TypeNS:
		if h.Name != z.Origin {
			z.cuts[h.Name] = true
		}
	}
	if _, hasCNAME := node[dns.TypeCNAME]; hasCNAME && h.Rrtype != dns.TypeCNAME {
		return fmt.Errorf("record %q: %s already has a CNAME; remove one of them", rr.String(), h.Name)
	}
	for _, old := range node[h.Rrtype] {
		if dns.IsDuplicate(old, rr) {
			return nil
		}
	}
	// RFC 2181 5.2: the records of one RRset share one TTL; the lowest wins.
	if set := node[h.Rrtype]; len(set) > 0 && set[0].Header().Ttl != h.Ttl {
		t := min(set[0].Header().Ttl, h.Ttl)
		for _, o := range set {
			o.Header().Ttl = t
		}
		h.Ttl = t
	}
	node[h.Rrtype] = append(node[h.Rrtype], rr)
	return nil
}

func (z *Zone) markParents(owner string) {
	for name := parent(owner); name != "" && name != z.Origin && dns.IsSubDomain(z.Origin, name); name = parent(name) {
		if _, ok := z.nodes[name]; !ok && !z.dynamic[name] {
			z.ents[name] = true
		}
	}
}

func parent(name string) string {
	i := strings.IndexByte(name, '.')
	if i < 0 || i == len(name)-1 {
		return ""
	}
	return name[i+1:]
}

// IsDynamic reports whether the lowercased name is a dynamic service name of the zone.
func (z *Zone) IsDynamic(name string) bool { return z.dynamic[name] }

// Negative returns the SOA to put in the authority section of a negative answer, with the TTL
// lowered to the SOA minimum as RFC 2308 section 3 asks.
func (z *Zone) Negative() dns.RR {
	soa := *z.SOA
	soa.Hdr.Ttl = min(soa.Hdr.Ttl, soa.Minttl)
	return &soa
}

// maxChain bounds CNAME chains inside the zone, so a loop in the data cannot loop the server.
const maxChain = 8

// Lookup answers qname/qtype (qname lowercased) from the zone's static data.
func (z *Zone) Lookup(qname string, qtype uint16) Result {
	var res Result
	for hop := 0; hop <= maxChain; hop++ {
		if cut := z.cutFor(qname); cut != "" && !(qtype == dns.TypeDS && cut == qname) {
			if len(res.Answer) > 0 {
				res.Kind = Answer // the chain leaves our authority: the resolver follows it
				return res
			}
			res.Kind = Referral
			res.Ns = z.nodes[cut][dns.TypeNS]
			res.Extra = z.glue(res.Ns)
			return res
		}
		if z.dynamic[qname] {
			res.Kind = Dynamic
			res.DynamicName = qname
			return res
		}
		node, ok := z.nodes[qname]
		if !ok && !z.ents[qname] {
			node, ok = z.wildcard(qname)
		}
		if !ok {
			// RFC 6604: after a CNAME chain the rcode describes the last name of the chain.
			res.Kind = NXDomain
			if z.ents[qname] {
				res.Kind = NoData
			}
			res.Ns = []dns.RR{z.Negative()}
			return res
		}
		if set, ok := node[qtype]; ok {
			res.Kind = Answer
			res.Answer = append(res.Answer, owned(set, qname)...)
			if qtype == dns.TypeNS || qtype == dns.TypeMX || qtype == dns.TypeSRV {
				res.Extra = z.glue(set)
			}
			return res
		}
		if qtype == dns.TypeANY {
			// RFC 8482: answer ANY with one RRset instead of the whole node.
			res.Kind = Answer
			res.Answer = append(res.Answer, owned(node[smallestType(node)], qname)...)
			return res
		}
		cname, ok := node[dns.TypeCNAME]
		if !ok {
			res.Kind = NoData
			res.Ns = []dns.RR{z.Negative()}
			return res
		}
		res.Answer = append(res.Answer, owned(cname, qname)...)
		target := strings.ToLower(cname[0].(*dns.CNAME).Target)
		if !dns.IsSubDomain(z.Origin, target) {
			res.Kind = Answer
			return res
		}
		qname = target
	}
	// A CNAME loop: return the chain so far; resolvers detect the loop themselves.
	res.Kind = Answer
	return res
}

// wildcard finds the wildcard node that synthesises qname (RFC 4592): "*." under the closest
// encloser, the nearest existing ancestor. A name below an existing name other than the apex is
// only covered by that name's own wildcard, never by one further up.
func (z *Zone) wildcard(qname string) (map[uint16][]dns.RR, bool) {
	for name := parent(qname); name != "" && dns.IsSubDomain(z.Origin, name); name = parent(name) {
		_, exists := z.nodes[name]
		if exists || z.ents[name] || z.dynamic[name] || name == z.Origin {
			node, ok := z.nodes["*."+name]
			return node, ok
		}
	}
	return nil, false
}

// owned returns set with the owner name qname: a no-op for exact matches, a copy with the
// asked name for records synthesised from a wildcard.
func owned(set []dns.RR, qname string) []dns.RR {
	if len(set) == 0 || set[0].Header().Name == qname {
		return set
	}
	out := make([]dns.RR, len(set))
	for i, rr := range set {
		c := dns.Copy(rr)
		c.Header().Name = qname
		out[i] = c
	}
	return out
}

func smallestType(node map[uint16][]dns.RR) uint16 {
	best := uint16(0)
	for t := range node {
		if best == 0 || t < best {
			best = t
		}
	}
	return best
}

// cutFor returns the delegation point at or above qname inside the zone, or "".
func (z *Zone) cutFor(qname string) string {
	if len(z.cuts) == 0 {
		return ""
	}
	for name := qname; name != "" && name != z.Origin; name = parent(name) {
		if z.cuts[name] {
			return name
		}
	}
	return ""
}

// glue returns the in-zone A/AAAA records of the targets of NS, MX and SRV records.
func (z *Zone) glue(set []dns.RR) []dns.RR {
	var out []dns.RR
	for _, rr := range set {
		var target string
		switch r := rr.(type) {
		case *dns.NS:
			target = r.Ns
		case *dns.MX:
			target = r.Mx
		case *dns.SRV:
			target = r.Target
		}
		target = strings.ToLower(target)
		if node, ok := z.nodes[target]; ok {
			out = append(out, node[dns.TypeA]...)
			out = append(out, node[dns.TypeAAAA]...)
		}
	}
	return out
}

// Count returns the number of static records in the zone.
func (z *Zone) Count() int {
	n := 0
	for _, node := range z.nodes {
		for _, set := range node {
			n += len(set)
		}
	}
	return n
}
