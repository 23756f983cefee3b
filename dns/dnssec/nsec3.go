package dnssec

import (
	"encoding/base32"
	"math/big"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// NSEC3 denial made per answer ("white lies", RFC 7129 appendix B; what online signers such as
// PowerDNS and Knot do): each proof is an NSEC3 record that matches a name's hash exactly or
// covers it by the narrowest span (the hash minus one to the hash plus one), so the records
// list no other name of the zone (no zone walking) and nothing is precomputed. SHA-1, no extra
// iterations, no salt: RFC 9276's parameters.

var b32 = base32.HexEncoding.WithPadding(base32.NoPadding)

// NSEC3PARAM is the record published at the apex of a zone denied by NSEC3.
func NSEC3PARAM(zone string, ttl uint32) *dns.NSEC3PARAM {
	return &dns.NSEC3PARAM{Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeNSEC3PARAM, Class: dns.ClassINET, Ttl: ttl},
		Hash: dns.SHA1}
}

// hashOf is name's NSEC3 hash, base32hex as an owner label writes it.
func hashOf(name string) string { return dns.HashName(strings.ToLower(name), dns.SHA1, 0, "") }

// step returns the 160-bit hash h (base32hex) plus d, modulo 2^160.
func step(h string, d int64) string {
	raw, err := b32.DecodeString(strings.ToUpper(h))
	if err != nil || len(raw) != 20 {
		return h
	}
	n := new(big.Int).SetBytes(raw)
	n.Add(n, big.NewInt(d))
	mod := new(big.Int).Lsh(big.NewInt(1), 160)
	n.Mod(n, mod)
	out := make([]byte, 20)
	n.FillBytes(out)
	return b32.EncodeToString(out)
}

// nsec3 makes an NSEC3 record owned by hash owner in zone, spanning to next, listing types.
func nsec3(zone, owner, next string, ttl uint32, types []uint16) *dns.NSEC3 {
	return &dns.NSEC3{Hdr: dns.RR_Header{Name: owner + "." + zone, Rrtype: dns.TypeNSEC3, Class: dns.ClassINET, Ttl: ttl},
		Hash: dns.SHA1, HashLength: 20, NextDomain: next, TypeBitMap: types}
}

// NSEC3Match is the NSEC3 record that matches name, an existing name of zone with types (RRSIG
// added when it has any): the proof of what it has, and so of what it has not.
func NSEC3Match(zone, name string, ttl uint32, types []uint16) *dns.NSEC3 {
	h := hashOf(name)
	bm := slices.Clone(types)
	if len(bm) > 0 {
		bm = append(bm, dns.TypeRRSIG)
	}
	slices.Sort(bm)
	return nsec3(zone, h, step(h, 1), ttl, slices.Compact(bm))
}

// NSEC3Cover is an NSEC3 record that covers name's hash (and no other name's, barring a
// collision): the proof that name does not exist.
func NSEC3Cover(zone, name string, ttl uint32) *dns.NSEC3 {
	h := hashOf(name)
	return nsec3(zone, step(h, -1), step(h, 1), ttl, nil)
}
