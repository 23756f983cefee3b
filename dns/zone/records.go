package zone

import (
	"bytes"
	"slices"
	"sort"
	"strings"

	"github.com/miekg/dns"
)

// transferred reports whether records of type t are part of a zone transfer: not the SOA
// (which frames it) and not the DNSKEYs, the online signer's (Build's keys): without the
// signatures, which are made per answer, a secondary could not serve them, so transfers carry
// the zone unsigned; a key policy's CDS and CDNSKEY go with the DNSKEYs.
func transferred(t uint16) bool {
	return t != dns.TypeSOA && t != dns.TypeDNSKEY && t != dns.TypeCDS && t != dns.TypeCDNSKEY
}

// owners returns the zone's owner names (not the empty non-terminals) in canonical order.
func (z *Zone) owners() []string {
	if names := z.canon.Load(); names != nil {
		return *names
	}
	// Two first transfers at once both sort; either result is the same.
	names := make([]string, 0, z.index.len())
	for name, off := range z.index.all() {
		if off != entMark {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, canonicalCompare)
	z.canon.Store(&names)
	return names
}

// Records returns every static record of the zone except the SOA and the DNSKEYs, in a stable
// order (owner in canonical order, then type, then text): the body of a zone transfer. It is
// unpacked for each call; the caller may keep or change it.
func (z *Zone) Records() []dns.RR {
	out := make([]dns.RR, 0, z.xfrCount)
	for _, name := range z.owners() {
		n, _ := z.node(name)
		n.each(func(s rrset) bool {
			if transferred(s.rrtype) {
				out = append(out, sortedText(s.rrs(name))...)
			}
			return true
		})
	}
	return out
}

// sortedText sorts one RRset's records by their text.
func sortedText(rrs []dns.RR) []dns.RR {
	if len(rrs) > 1 {
		sort.Slice(rrs, func(i, j int) bool { return rrs[i].String() < rrs[j].String() })
	}
	return rrs
}

// RecordsLen is the number of records Records returns, without making them.
func (z *Zone) RecordsLen() int { return z.xfrCount }

// Diff returns the records of old's transfer body missing from new's (deleted) and those of
// new's missing from old's (added), in Records' order: an IXFR step. It compares the packed
// RRsets and unpacks only what differs, so a reload's journal costs the change, not two copies
// of the zone as records. A record whose TTL changed is deleted and added.
func Diff(old, new *Zone) (del, add []dns.RR) {
	on, nn := old.owners(), new.owners()
	for len(on) > 0 || len(nn) > 0 {
		// The owners of both, merged in canonical order.
		var name string
		switch {
		case len(nn) == 0 || len(on) > 0 && canonicalCompare(on[0], nn[0]) < 0:
			name, on = on[0], on[1:]
		case len(on) == 0 || canonicalCompare(on[0], nn[0]) > 0:
			name, nn = nn[0], nn[1:]
		default:
			name, on, nn = nn[0], on[1:], nn[1:]
		}
		d, a := diffNode(old, new, name)
		del, add = append(del, d...), append(add, a...)
	}
	return del, add
}

// diffNode compares the transferred RRsets of name in two versions of a zone, in type order.
func diffNode(old, new *Zone, name string) (del, add []dns.RR) {
	on, _ := old.node(name)
	nn, _ := new.node(name)
	types := append(on.types(), nn.types()...)
	slices.Sort(types)
	for _, t := range slices.Compact(types) {
		if !transferred(t) {
			continue
		}
		os, _ := on.set(t)
		ns, _ := nn.set(t)
		d, a := diffSet(os, ns, name)
		del, add = append(del, d...), append(add, a...)
	}
	return del, add
}

// diffSet compares one RRset of two versions of a node (count 0: absent from that version).
func diffSet(old, new rrset, owner string) (del, add []dns.RR) {
	if old.ttl == new.ttl && old.count == new.count && bytes.Equal(old.body, new.body) {
		return nil, nil
	}
	if old.ttl != new.ttl || old.count == 0 || new.count == 0 {
		return sortedText(old.rrs(owner)), sortedText(new.rrs(owner))
	}
	inOld, inNew := map[string]bool{}, map[string]bool{}
	old.eachRdata(func(rd []byte) { inOld[string(rd)] = true })
	new.eachRdata(func(rd []byte) { inNew[string(rd)] = true })
	for _, rr := range sortedText(old.rrs(owner)) {
		if !inNew[string(rdataOf(rr))] {
			del = append(del, rr)
		}
	}
	for _, rr := range sortedText(new.rrs(owner)) {
		if !inOld[string(rdataOf(rr))] {
			add = append(add, rr)
		}
	}
	return del, add
}

// rdataOf returns rr's rdata in wire form (uncompressed), as the packed form holds it.
func rdataOf(rr dns.RR) []byte {
	buf := make([]byte, dns.Len(rr)+len(rr.Header().Name)+16)
	end, err := dns.PackRR(rr, buf, 0, nil, false)
	if err != nil {
		return nil
	}
	return buf[end-int(rr.Header().Rdlength) : end]
}

// canonicalCompare orders names as RFC 4034 6.1 does, label by label from the root (labels
// compared as their presentation text, unescaped dots separating them), without allocating.
func canonicalCompare(a, b string) int {
	ea, eb := len(a), len(b)
	if ea > 0 && a[ea-1] == '.' {
		ea--
	}
	if eb > 0 && b[eb-1] == '.' {
		eb--
	}
	for ea > 0 && eb > 0 {
		sa, sb := labelStart(a, ea), labelStart(b, eb)
		if c := strings.Compare(a[sa:ea], b[sb:eb]); c != 0 {
			return c
		}
		ea, eb = max(sa-1, 0), max(sb-1, 0)
	}
	switch {
	case ea > 0:
		return 1
	case eb > 0:
		return -1
	}
	return 0
}

// labelStart returns where the label ending at end (exclusive) starts: after the nearest dot
// before end that no odd run of backslashes escapes.
func labelStart(s string, end int) int {
	for i := end - 1; i >= 0; i-- {
		if s[i] != '.' {
			continue
		}
		esc := 0
		for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
			esc++
		}
		if esc%2 == 0 {
			return i + 1
		}
	}
	return 0
}
