// Package zone holds the static data of the zones the DNS stop is authoritative for and answers
// lookups on it: exact matches, CNAME chains inside the zone, delegations, NODATA and NXDOMAIN
// with the SOA for negative caching. A zone's data is immutable once built (what fills on use,
// the unpacked sets answers share and the canonical order transfers walk, is safe for
// concurrent queries), so the server swaps whole stores on reload, in-flight queries keep the
// store they started with, and an unchanged zone is carried from one store to the next.
package zone

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// Zone is one zone of authority. Its static records are held packed (packed.go): one []byte of
// wire-format RRsets and an index from owner name to offset, no miekg/dns object per record.
type Zone struct {
	// Origin is the lowercased, fully qualified apex.
	Origin string
	// SOA is the zone's start of authority.
	SOA *dns.SOA
	// data holds the nodes; index maps a lowercased owner name to its node's offset in data,
	// or to entMark for an empty non-terminal.
	data  []byte
	index index
	// dynamic marks owners answered by a routing policy; they exist for NODATA purposes.
	dynamic map[string]bool
	// canon is the owners in canonical order, sorted on first use (a transfer): zones that are
	// never transferred do not pay for it.
	canon atomic.Pointer[[]string]
	// id names the zone's data in the process's set cache (setCache): a zone whose data
	// changes (a build, an update, a transfer) gets a new one.
	id uint64
	// hasCuts is set when the zone delegates (has NS records below the apex).
	hasCuts bool
	// count is the number of static records, xfrCount of those a transfer carries (Records).
	count, xfrCount int
	// source is the hash of what the zone was built from (Build carries it over when unchanged),
	// keys the hash of the DNSKEYs it publishes.
	source, keys source
	// maxTTL is the largest TTL of the zone's data and dynamic names (a signed zone's RRSIGs
	// live that long in caches: RFC 7583's TTLsig); limit, when not 0, is the largest allowed
	// (dnssec.policy.zone_max_ttl).
	maxTTL, limit uint32
	// rekeyedFrom is the id of the zone this one is with new keys (rekey), 0 for none.
	rekeyedFrom uint64
	// retired is set once a newer copy of the zone serves in its place (Retire).
	retired atomic.Bool
	// lineage, version and recent place the copy among those Apply made from one another
	// (lineage.go); lineage 0 is a copy that starts its own.
	lineage, version uint64
	recent           []*change
}

// Retire marks z as replaced by a newer copy of the same zone (an update, a transfer, a
// one-zone reload): answers built from z are out of date from here on.
func (z *Zone) Retire() { z.retired.Store(true) }

// Retired reports whether a newer copy of the zone serves in z's place.
func (z *Zone) Retired() bool { return z.retired.Load() }

// KeysFunc returns the DNSKEY RRset (with CDS and CDNSKEY) that the online-signed zone zc
// publishes, given the largest TTL of its data: a key policy's rollover timings depend on it.
type KeysFunc func(zc *config.Zone, maxTTL uint32) ([]dns.RR, error)

// MaxTTL is the largest TTL of the zone's data and dynamic names.
func (z *Zone) MaxTTL() uint32 { return z.maxTTL }

// ttlLimit is the largest TTL zc's data may have: its key policy's zone_max_ttl, 0 for none.
func ttlLimit(zc *config.Zone) uint32 {
	if zc.DNSSEC == nil || zc.DNSSEC.Policy == nil {
		return 0
	}
	return zc.DNSSEC.Policy.ZoneMaxTTL
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
	// Wildcard is set when records of the answer were synthesised from a wildcard.
	Wildcard bool
}

// Build parses the static records of every zone of c; keys makes the DNSKEY RRsets of the
// online-signed zones (nil: none are signed). A zone built from the same source as the one of
// the same origin in prev (configuration, zone file content and DNSKEYs unchanged) is taken
// from prev as it is, the same *Zone, instead of being parsed again: a reload of many zones
// where one changed costs the memory and time of that one. prev may be nil. Secondary zones
// are left out.
func Build(c *config.Config, prev *Store, keys KeysFunc) (*Store, error) {
	s := &Store{zones: map[string]*Zone{}}
	for i := range c.Zones {
		zc := &c.Zones[i]
		if zc.Secondary != nil {
			continue // its data comes by transfer: the server adds it (package secondary)
		}
		z, err := BuildZone(zc, c.Dir, prev, keys)
		if err != nil {
			return nil, err
		}
		s.zones[z.Origin] = z
	}
	return s, nil
}

// BuildZone builds the one zone zc (files relative to dir) as Build does, taking prev's zone of
// its origin as it is when its source and keys are unchanged: what a reload of that zone alone
// needs. Errors name the zone and its configuration line.
func BuildZone(zc *config.Zone, dir string, prev *Store, keys KeysFunc) (*Zone, error) {
	z, err := buildOrCarry(zc, dir, prev, keys)
	switch {
	case err == nil:
		return z, nil
	case zc.Line > 0:
		return nil, fmt.Errorf("line %d: zone %s: %w", zc.Line, zc.Origin, err)
	}
	return nil, fmt.Errorf("zone %s: %w", zc.Origin, err)
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

// buildOrCarry builds zc's zone, or takes prev's when its data and keys are unchanged.
func buildOrCarry(zc *config.Zone, dir string, prev *Store, keys KeysFunc) (*Zone, error) {
	keysOf := func(maxTTL uint32) ([]dns.RR, error) {
		if zc.DNSSEC == nil || keys == nil {
			return nil, nil
		}
		return keys(zc, maxTTL)
	}
	if old := carried(prev, zc, dir); old != nil {
		ks, err := keysOf(old.maxTTL)
		if err != nil {
			return nil, err
		}
		if zc.DNSSEC == nil || hashKeys(ks) == old.keys {
			return old, nil
		}
		return rekey(old, ks)
	}
	var like *Zone
	if prev != nil {
		like = prev.zones[zc.Origin]
	}
	return buildZone(zc, dir, keysOf, like)
}

func buildZone(zc *config.Zone, dir string, keys func(maxTTL uint32) ([]dns.RR, error), like *Zone) (*Zone, error) {
	z := &Zone{Origin: zc.Origin, id: zoneIDs.Add(1), limit: ttlLimit(zc)}
	b := newBuilder(z, like)
	h := hashConfig(zc, dir)
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
		if err := parse(tee, zc.Origin, path, zc.TTL, b.add); err != nil {
			return nil, err
		}
		if _, err := io.Copy(io.Discard, tee); err != nil {
			return nil, fmt.Errorf("read zone file: %w", err)
		}
	}
	copy(z.source[:], h.Sum(nil))
	if len(zc.Records) > 0 {
		r := strings.NewReader(strings.Join(zc.Records, "\n") + "\n")
		if err := parse(r, zc.Origin, "records", zc.TTL, b.add); err != nil {
			return nil, err
		}
	}
	if err := b.apex(zc, keys); err != nil {
		return nil, err
	}
	if err := b.finish(); err != nil {
		return nil, err
	}
	return z, nil
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

// parse reads zone-file records from r and hands each to add as it is read, so the file is
// never held whole as parsed objects.
func parse(r io.Reader, origin, file string, ttl uint32, add func(dns.RR) error) error {
	zp := dns.NewZoneParser(r, origin, file)
	zp.SetDefaultTTL(ttl)
	// $INCLUDE would let a zone file read arbitrary files; zones come from the operator's config.
	zp.SetIncludeAllowed(false)
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if err := add(rr); err != nil {
			return err
		}
	}
	if err := zp.Err(); err != nil {
		return fmt.Errorf("parse records: %w", err)
	}
	return nil
}

// node returns the node of the lowercased name; ent reports an empty non-terminal.
func (z *Zone) node(name string) (n node, ent bool) {
	off, ok := z.index.get(name)
	switch {
	case !ok:
		return node{}, false
	case off == entMark:
		return node{}, true
	}
	return node{b: z.data[off:], off: off}, false
}

func (z *Zone) markParents(owner string) {
	for name := parent(owner); name != "" && name != z.Origin && inZone(name, z.Origin); name = parent(name) {
		if _, ok := z.index.get(name); !ok && !z.dynamic[name] {
			z.index.set(name, entMark)
		}
	}
}

// inZone reports whether the lowercased, fully qualified name is origin or below it, as
// dns.IsSubDomain does, without its allocations (it runs for every record parsed and every
// ancestor a lookup walks): a suffix that starts at a label boundary, not at an escaped dot.
func inZone(name, origin string) bool {
	if origin == "." || name == origin {
		return true
	}
	i := len(name) - len(origin) - 1 // the dot before origin
	if i < 0 || name[i] != '.' || name[i+1:] != origin {
		return false
	}
	esc := 0
	for j := i - 1; j >= 0 && name[j] == '\\'; j-- {
		esc++
	}
	return esc%2 == 0
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

// Lookup answers qname/qtype (qname lowercased) from the zone's static data. The records are
// unpacked for this answer: the caller may change them.
func (z *Zone) Lookup(qname string, qtype uint16) Result {
	var res Result
	for hop := 0; hop <= maxChain; hop++ {
		if cut := z.cutFor(qname); cut != "" && !(qtype == dns.TypeDS && cut == qname) {
			if len(res.Answer) > 0 {
				res.Kind = Answer // the chain leaves our authority: the resolver follows it
				return res
			}
			res.Kind = Referral
			n, _ := z.node(cut)
			ns, _ := n.set(dns.TypeNS)
			res.Ns = z.shared(ns, cut)
			res.Extra = z.glue(res.Ns)
			return res
		}
		if z.dynamic[qname] {
			res.Kind = Dynamic
			res.DynamicName = qname
			return res
		}
		n, ent := z.node(qname)
		wild := false // records synthesised from a wildcard are unpacked with the asked name
		if !n.exists() && !ent {
			n, wild = z.wildcard(qname), true
			res.Wildcard = true
		}
		rrs := func(s rrset) []dns.RR {
			if wild {
				return s.rrs(qname)
			}
			return z.shared(s, qname)
		}
		if !n.exists() {
			// RFC 6604: after a CNAME chain the rcode describes the last name of the chain.
			res.Kind = NXDomain
			if ent {
				res.Kind = NoData
			}
			res.Ns = []dns.RR{z.Negative()}
			return res
		}
		if set, ok := n.set(qtype); ok {
			res.Kind = Answer
			set := rrs(set)
			res.Answer = append(res.Answer, set...)
			if qtype == dns.TypeNS || qtype == dns.TypeMX || qtype == dns.TypeSRV {
				res.Extra = z.glue(set)
			}
			return res
		}
		if qtype == dns.TypeANY {
			// RFC 8482: answer ANY with one RRset instead of the whole node (the smallest type).
			res.Kind = Answer
			n.each(func(s rrset) bool { res.Answer = append(res.Answer, rrs(s)...); return false })
			return res
		}
		cset, ok := n.set(dns.TypeCNAME)
		if !ok {
			res.Kind = NoData
			res.Ns = []dns.RR{z.Negative()}
			return res
		}
		cname := rrs(cset)
		res.Answer = append(res.Answer, cname...)
		target := strings.ToLower(cname[0].(*dns.CNAME).Target)
		if !inZone(target, z.Origin) {
			res.Kind = Answer
			return res
		}
		qname = target
	}
	// A CNAME loop: return the chain so far; resolvers detect the loop themselves.
	res.Kind = Answer
	return res
}

// Encloser returns the closest encloser of qname (RFC 5155 1.3: qname itself when it exists,
// an empty non-terminal or a dynamic name included, else its longest existing ancestor) and
// whether a wildcard at that encloser synthesises qname.
func (z *Zone) Encloser(qname string) (ce string, wildcard bool) {
	exists := func(name string) bool {
		n, ent := z.node(name)
		return n.exists() || ent || z.dynamic[name] || name == z.Origin
	}
	if exists(qname) {
		return qname, false
	}
	for name := parent(qname); name != "" && inZone(name, z.Origin); name = parent(name) {
		if exists(name) {
			w, _ := z.node("*." + name)
			return name, w.exists()
		}
	}
	return z.Origin, false
}

// wildcard finds the wildcard node that synthesises qname (RFC 4592): "*." under the closest
// encloser, the nearest existing ancestor. A name below an existing name other than the apex is
// only covered by that name's own wildcard, never by one further up.
func (z *Zone) wildcard(qname string) node {
	for name := parent(qname); name != "" && inZone(name, z.Origin); name = parent(name) {
		if _, exists := z.index.get(name); exists || z.dynamic[name] || name == z.Origin {
			n, _ := z.node("*." + name)
			return n
		}
	}
	return node{}
}

// cutFor returns the delegation point at or above qname inside the zone, or "".
func (z *Zone) cutFor(qname string) string {
	if !z.hasCuts {
		return ""
	}
	for name := qname; name != "" && name != z.Origin; name = parent(name) {
		if n, _ := z.node(name); n.cut() {
			return name
		}
	}
	return ""
}

// GlueTarget is the lowercased name whose addresses an NS, MX or SRV record's answer carries as
// glue, "" for other records.
func GlueTarget(rr dns.RR) string {
	switch r := rr.(type) {
	case *dns.NS:
		return strings.ToLower(r.Ns)
	case *dns.MX:
		return strings.ToLower(r.Mx)
	case *dns.SRV:
		return strings.ToLower(r.Target)
	}
	return ""
}

// glue returns the in-zone A/AAAA records of the targets of NS, MX and SRV records.
func (z *Zone) glue(set []dns.RR) []dns.RR {
	var out []dns.RR
	for _, rr := range set {
		target := GlueTarget(rr)
		if n, _ := z.node(target); n.exists() {
			for _, t := range []uint16{dns.TypeA, dns.TypeAAAA} {
				if s, ok := n.set(t); ok {
					out = append(out, z.shared(s, target)...)
				}
			}
		}
	}
	return out
}

// Count returns the number of static records in the zone.
func (z *Zone) Count() int { return z.count }
