package zone

import (
	"encoding/binary"

	"github.com/miekg/dns"
)

// The packed form. A zone's static records live in one []byte, node after node; an index maps
// each lowercased owner name to its node's offset, so the zone keeps no miekg/dns object per
// record (about 500 bytes an A record as a map of maps of RRs, under 100 packed). A node is
//
//	flags  uint8  (nodeCut: a delegation point below the apex)
//	nsets  uint16
//	nsets RRsets, sorted by type:
//	  type   uint16
//	  ttl    uint32 (one per RRset, RFC 2181 5.2)
//	  count  uint32
//	  size   uint32 (bytes of the records that follow)
//	  count records: rdlength uint16, then the rdata in wire form, names uncompressed
//
// Answers unpack the RRsets they carry (dns.UnpackRRWithHeader), so what is packed into the
// reply is exactly what the parsed records would have packed to.

const (
	nodeHeader = 3
	setHeader  = 14
	// nodeCut marks a delegation point below the apex (an owner with NS records).
	nodeCut = 1 << 0
	// entMark is the index value of an empty non-terminal: a name with no records of its own
	// but with descendants, which answers NODATA rather than NXDOMAIN (RFC 8020).
	entMark = ^uint32(0)
)

// node is a view of one packed node; the zero node is "no such name".
type node struct {
	b   []byte // from the node's first byte to the end of the zone's data
	off uint32 // of the node in the zone's data
}

// rrset is a view of one packed RRset.
type rrset struct {
	off    uint32 // of the set's header in the zone's data (setCache's key)
	rrtype uint16
	ttl    uint32
	count  int
	body   []byte // the records: rdlength, rdata, ...
}

func (n node) exists() bool { return n.b != nil }

func (n node) cut() bool { return n.b != nil && n.b[0]&nodeCut != 0 }

func (n node) nsets() int {
	if n.b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(n.b[1:]))
}

// each calls f on the node's RRsets in type order until f returns false.
func (n node) each(f func(rrset) bool) {
	off := nodeHeader
	for range n.nsets() {
		h := n.b[off:]
		size := int(binary.BigEndian.Uint32(h[10:]))
		s := rrset{off: n.off + uint32(off), rrtype: binary.BigEndian.Uint16(h), ttl: binary.BigEndian.Uint32(h[2:]),
			count: int(binary.BigEndian.Uint32(h[6:])), body: h[setHeader : setHeader+size]}
		if !f(s) {
			return
		}
		off += setHeader + size
	}
}

// set returns the node's RRset of type t.
func (n node) set(t uint16) (rrset, bool) {
	var out rrset
	found := false
	n.each(func(s rrset) bool {
		if s.rrtype == t {
			out, found = s, true
		}
		return !found && s.rrtype < t
	})
	return out, found
}

// types returns the node's types, sorted.
func (n node) types() []uint16 {
	out := make([]uint16, 0, n.nsets())
	n.each(func(s rrset) bool { out = append(out, s.rrtype); return true })
	return out
}

// eachRdata calls f on the rdata of each record of the set.
func (s rrset) eachRdata(f func([]byte)) {
	for off := 0; off+2 <= len(s.body); {
		n := int(binary.BigEndian.Uint16(s.body[off:]))
		f(s.body[off+2 : off+2+n])
		off += 2 + n
	}
}

// rrs unpacks the RRset with the owner name owner (the asked name for a wildcard's records).
// Records that do not unpack were refused when the zone was built (checkUnpack), so none is
// dropped here in practice.
func (s rrset) rrs(owner string) []dns.RR {
	if s.count == 0 {
		return nil
	}
	out := make([]dns.RR, 0, s.count)
	for off := 0; off+2 <= len(s.body); {
		n := int(binary.BigEndian.Uint16(s.body[off:]))
		h := dns.RR_Header{Name: owner, Rrtype: s.rrtype, Class: dns.ClassINET, Ttl: s.ttl, Rdlength: uint16(n)}
		rr, _, err := dns.UnpackRRWithHeader(h, s.body[:off+2+n], off+2)
		if err == nil {
			rr.Header().Rdlength = 0 // as parsed: the length is the packer's business
			out = append(out, rr)
		}
		off += 2 + n
	}
	return out
}
