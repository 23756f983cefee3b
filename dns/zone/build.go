package zone

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// builder streams parsed records into the packed form: each record is checked as it comes (in
// file order, so the error names the record that broke the rule) and staged as its rdata bytes,
// and the parsed miekg/dns object is dropped at once. finish sorts the staged records into nodes.
// The parse never holds the whole file as objects: a build needs about the packed zone twice.
type builder struct {
	z *Zone
	// owners maps an owner to its id while staging; finish turns it into the zone's index.
	owners map[string]uint32
	flags  []uint8 // by id: ownHasData, ownHasCNAME, ownIsCut
	recs   []staged
	rdata  []byte
	apexNS bool
	buf    *[]byte  // PackRR scratch, from packBufs until finish
	kept   []staged // set's scratch
	gc     *gcBound
}

// staged is one record: its owner, type, TTL and rdata (rdata[off:off+n]).
type staged struct {
	owner, off, ttl uint32
	rrtype, n       uint16
}

const (
	ownHasData = 1 << iota
	ownHasCNAME
	ownIsCut
)

// newBuilder starts the build of z; like, when set, is the zone it replaces, whose size the
// staging is made for, so a reload does not grow it by doubling (copies of it at a time).
func newBuilder(z *Zone, like *Zone) *builder {
	b := &builder{z: z, buf: packBufs.Get().(*[]byte), gc: newGCBound()}
	if like == nil {
		b.owners = map[string]uint32{}
		return b
	}
	b.owners = make(map[string]uint32, like.index.len())
	b.recs = make([]staged, 0, like.count+like.count/16)
	b.flags = make([]uint8, 0, like.index.len())
	return b
}

// packBufs are the builders' PackRR scratch buffers (a largest message each), reused: a server
// starting with 100,000 small zones otherwise allocated 6.5 GB of them, a collection every few
// hundred zones.
var packBufs = sync.Pool{New: func() any { b := make([]byte, dns.MaxMsgSize); return &b }}

// owner returns the id of name, adding it.
func (b *builder) owner(name string) uint32 {
	if id, ok := b.owners[name]; ok {
		return id
	}
	id := uint32(len(b.flags))
	b.owners[name] = id
	b.flags = append(b.flags, 0)
	return id
}

// add checks rr against the zone's rules and stages it.
func (b *builder) add(rr dns.RR) error {
	z := b.z
	h := rr.Header()
	h.Name = strings.ToLower(h.Name)
	if h.Class != dns.ClassINET {
		return fmt.Errorf("record %q: class %s is not served; use IN", rr.String(), dns.ClassToString[h.Class])
	}
	if h.Rrtype == dns.TypeSOA && !inZone(h.Name, z.Origin) {
		return fmt.Errorf("the SOA is for %s, not the zone's origin %s: the data is another zone's (or its $ORIGIN is wrong); point the zone's file at its own data, or change its origin in the configuration",
			h.Name, z.Origin)
	}
	if !inZone(h.Name, z.Origin) {
		return fmt.Errorf("record %q: owner %s is outside the zone %s", rr.String(), h.Name, z.Origin)
	}
	id := b.owner(h.Name)
	f := b.flags[id]
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
		if f&ownHasData != 0 {
			return fmt.Errorf("record %q: a CNAME cannot coexist with other data at %s (RFC 1034 3.6.2)", rr.String(), h.Name)
		}
		f |= ownHasCNAME
	case dns.TypeNS:
		if h.Name != z.Origin {
			f |= ownIsCut
		} else {
			b.apexNS = true
		}
	}
	if f&ownHasCNAME != 0 && h.Rrtype != dns.TypeCNAME {
		return fmt.Errorf("record %q: %s already has a CNAME; remove one of them", rr.String(), h.Name)
	}
	b.flags[id] = f | ownHasData
	b.gc.record()
	return b.stage(id, rr)
}

// apex completes the zone: the SOA and apex NS set when the data has none, the dynamic names
// (which must not also have records) and, for an online-signed zone, the DNSKEY RRset that
// keys makes for the data's largest TTL.
func (b *builder) apex(zc *config.Zone, keys func(maxTTL uint32) ([]dns.RR, error)) error {
	z := b.z
	apex := b.owner(z.Origin)
	if z.SOA == nil {
		z.SOA = defaultSOA(zc)
		if err := b.stage(apex, z.SOA); err != nil {
			return err
		}
	}
	if !b.apexNS {
		// An authoritative zone needs an apex NS set; derive it from the SOA's primary name.
		ns := &dns.NS{Hdr: dns.RR_Header{Name: z.Origin, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: z.SOA.Hdr.Ttl},
			Ns: z.SOA.Ns}
		if err := b.stage(apex, ns); err != nil {
			return err
		}
	}
	b.flags[apex] |= ownHasData
	z.maxTTL = b.maxTTL()
	for _, n := range zc.Names {
		if b.has(n.Name) {
			return fmt.Errorf("dynamic name %s also has static records; remove one of them", n.Name)
		}
		if z.limit != 0 && n.TTL > z.limit {
			return fmt.Errorf("name %s: ttl %d is above dnssec.policy.zone_max_ttl %d; lower the name's ttl or raise zone_max_ttl",
				n.Name, n.TTL, z.limit)
		}
		if z.dynamic == nil { // most zones have none: no map for them
			z.dynamic = map[string]bool{}
		}
		z.dynamic[n.Name] = true
		z.maxTTL = max(z.maxTTL, n.TTL)
	}
	if zc.DNSSEC == nil {
		return nil
	}
	for _, r := range b.recs {
		if presigned[r.rrtype] {
			return fmt.Errorf("record %s %s: the zone is signed online (dnssec:), so it makes its own DNSKEY, RRSIG and NSEC records; remove it from the zone data",
				b.name(r.owner), dns.TypeToString[r.rrtype])
		}
	}
	// The online signer's DNSKEY RRset; zone transfers leave it out (Records).
	ks, err := keys(z.maxTTL)
	if err != nil {
		return err
	}
	z.keys = hashKeys(ks)
	for _, k := range ks {
		if err := b.stage(apex, k); err != nil {
			return err
		}
	}
	return nil
}

// maxTTL is the largest TTL of the records staged.
func (b *builder) maxTTL() uint32 {
	var m uint32
	for _, r := range b.recs {
		m = max(m, r.ttl)
	}
	return m
}

// stage packs rr's rdata and appends it to the staged records.
func (b *builder) stage(id uint32, rr dns.RR) error {
	end, err := dns.PackRR(rr, *b.buf, 0, nil, false)
	if err != nil {
		return fmt.Errorf("record %q: pack: %w", rr.String(), err)
	}
	h := rr.Header()
	if b.z.limit != 0 && h.Ttl > b.z.limit {
		// A signature lives in caches as long as its RRset: the key policy's rollover
		// timings assume none lives longer than zone_max_ttl.
		return fmt.Errorf("record %q: TTL %d is above dnssec.policy.zone_max_ttl %d; lower the record's TTL or raise zone_max_ttl",
			rr.String(), h.Ttl, b.z.limit)
	}
	rd := (*b.buf)[end-int(h.Rdlength) : end]
	// What is staged must unpack to the record again, or answers would lose it. The common
	// types' rdata (addresses, names, strings, numbers) always does; the rest is checked.
	if !simpleRdata[h.Rrtype] {
		check := dns.RR_Header{Name: h.Name, Rrtype: h.Rrtype, Class: h.Class, Ttl: h.Ttl, Rdlength: h.Rdlength}
		if _, _, err := dns.UnpackRRWithHeader(check, rd, 0); err != nil {
			return fmt.Errorf("record %q: its wire form does not read back (%w); write it in RFC 3597 form (TYPEn \\# len hex)", rr.String(), err)
		}
	}
	if len(b.rdata)+len(rd) > math.MaxUint32-1 {
		return errors.New("zone data over 4 GiB; split the zone")
	}
	b.recs = append(b.recs, staged{owner: id, off: uint32(len(b.rdata)), ttl: h.Ttl, rrtype: h.Rrtype, n: h.Rdlength})
	b.rdata = append(b.rdata, rd...)
	return nil
}

// name returns the owner of id (for error messages: it walks the owners).
func (b *builder) name(id uint32) string {
	for name, i := range b.owners {
		if i == id {
			return name
		}
	}
	return ""
}

// simpleRdata are the types whose packed rdata unpacks whatever it holds.
var simpleRdata = map[uint16]bool{dns.TypeA: true, dns.TypeAAAA: true, dns.TypeNS: true, dns.TypeCNAME: true,
	dns.TypePTR: true, dns.TypeMX: true, dns.TypeTXT: true, dns.TypeSRV: true, dns.TypeSOA: true, dns.TypeCAA: true}

// has reports whether name has staged records.
func (b *builder) has(name string) bool {
	id, ok := b.owners[name]
	return ok && b.flags[id]&ownHasData != 0
}

// finish writes the staged records as nodes and the index, and marks the empty non-terminals
// above every owner and dynamic name.
func (b *builder) finish() error {
	z := b.z
	packBufs.Put(b.buf) // staging is over (a failed build leaves its buffer to the collector)
	b.buf = nil
	slices.SortStableFunc(b.recs, func(x, y staged) int {
		return cmp.Or(cmp.Compare(x.owner, y.owner), cmp.Compare(x.rrtype, y.rrtype))
	})
	// Sized to what the nodes take (less any duplicates dropped), so append never grows it: a
	// grown slice keeps up to twice its length, which with 100,000 small zones was half their data.
	nsets := 0
	for i, r := range b.recs {
		if i == 0 || r.owner != b.recs[i-1].owner || r.rrtype != b.recs[i-1].rrtype {
			nsets++
		}
	}
	data := make([]byte, 0, len(b.rdata)+len(b.recs)*2+len(b.flags)*nodeHeader+nsets*setHeader)
	// Node offsets by owner id: the index takes them below, in place of the ids.
	offs := make([]uint32, len(b.flags))
	for i := 0; i < len(b.recs); {
		j := i
		for j < len(b.recs) && b.recs[j].owner == b.recs[i].owner {
			j++
		}
		if len(data) > math.MaxUint32-1 {
			return errors.New("zone data over 4 GiB; split the zone")
		}
		offs[b.recs[i].owner] = uint32(len(data))
		data = b.node(data, b.recs[i:j])
		i = j
	}
	z.data = data
	b.recs, b.rdata, b.flags = nil, nil, nil
	z.index = newIndex(len(b.owners))
	for name, id := range b.owners {
		z.index.set(name, offs[id])
	}
	for name := range b.owners {
		z.markParents(name)
	}
	for name := range z.dynamic {
		z.markParents(name)
	}
	return nil
}

// node appends the node of one owner's records (sorted by type, in file order within a type).
func (b *builder) node(data []byte, recs []staged) []byte {
	var flags uint8
	if b.flags[recs[0].owner]&ownIsCut != 0 {
		flags = nodeCut
		b.z.hasCuts = true
	}
	start := len(data)
	data = append(data, flags, 0, 0)
	sets := 0
	for i := 0; i < len(recs); {
		j := i
		for j < len(recs) && recs[j].rrtype == recs[i].rrtype {
			j++
		}
		data = b.set(data, recs[i:j])
		sets++
		i = j
	}
	binary.BigEndian.PutUint16(data[start+1:], uint16(sets))
	return data
}

// set appends one RRset: duplicates dropped (as dns.IsDuplicate judges them), one TTL, the
// lowest of its records' (RFC 2181 5.2).
func (b *builder) set(data []byte, recs []staged) []byte {
	start := len(data)
	data = append(data, make([]byte, setHeader)...)
	ttl := recs[0].ttl
	kept := b.kept[:0]
	defer func() { b.kept = kept[:0] }()
	for _, r := range recs {
		ttl = min(ttl, r.ttl)
		if !slices.ContainsFunc(kept, func(k staged) bool { return b.duplicate(k, r) }) {
			kept = append(kept, r)
			data = binary.BigEndian.AppendUint16(data, r.n)
			data = append(data, b.rdata[r.off:r.off+uint32(r.n)]...)
		}
	}
	h := data[start:]
	binary.BigEndian.PutUint16(h, recs[0].rrtype)
	binary.BigEndian.PutUint32(h[2:], ttl)
	binary.BigEndian.PutUint32(h[6:], uint32(len(kept)))
	binary.BigEndian.PutUint32(h[10:], uint32(len(data)-start-setHeader))
	b.z.count += len(kept)
	if t := recs[0].rrtype; t != dns.TypeSOA && t != dns.TypeDNSKEY {
		b.z.xfrCount += len(kept)
	}
	return data
}

// duplicate reports whether two staged records of one RRset are the same record: the same
// rdata bytes, or, when the bytes differ only in letter case (names in the rdata), what
// dns.IsDuplicate says of the two records.
func (b *builder) duplicate(x, y staged) bool {
	rx, ry := b.rdata[x.off:x.off+uint32(x.n)], b.rdata[y.off:y.off+uint32(y.n)]
	if bytes.Equal(rx, ry) {
		return true
	}
	if x.n != y.n || !bytes.EqualFold(rx, ry) {
		return false
	}
	h := dns.RR_Header{Name: ".", Rrtype: x.rrtype, Class: dns.ClassINET, Rdlength: x.n}
	a, _, err1 := dns.UnpackRRWithHeader(h, rx, 0)
	c, _, err2 := dns.UnpackRRWithHeader(h, ry, 0)
	return err1 == nil && err2 == nil && dns.IsDuplicate(a, c)
}
