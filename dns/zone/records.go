package zone

import (
	"sort"

	"github.com/miekg/dns"
)

// Records returns every static record of the zone except the SOA and the DNSKEYs, in a stable order (owner in
// canonical order, then type, then text): the body of a zone transfer.
func (z *Zone) Records() []dns.RR {
	out := make([]dns.RR, 0, z.count)
	for name, off := range z.index {
		if off == entMark {
			continue
		}
		node{b: z.data[off:], off: off}.each(func(s rrset) bool {
			if s.rrtype != dns.TypeSOA && s.rrtype != dns.TypeDNSKEY {
				// DNSKEY is the online signer's (Build's keys): without the signatures, which are
				// made per answer, a secondary could not serve it, so transfers carry the zone
				// unsigned.
				out = append(out, s.rrs(name)...)
			}
			return true
		})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Header(), out[j].Header()
		if a.Name != b.Name {
			return canonicalLess(a.Name, b.Name)
		}
		if a.Rrtype != b.Rrtype {
			return a.Rrtype < b.Rrtype
		}
		return out[i].String() < out[j].String()
	})
	return out
}

// RecordsLen is the number of records Records returns, without making them.
func (z *Zone) RecordsLen() int { return z.xfrCount }

// canonicalLess orders names as RFC 4034 6.1 does: label by label from the root.
func canonicalLess(a, b string) bool {
	la, lb := dns.SplitDomainName(a), dns.SplitDomainName(b)
	for i, j := len(la)-1, len(lb)-1; i >= 0 && j >= 0; i, j = i-1, j-1 {
		if la[i] != lb[j] {
			return la[i] < lb[j]
		}
	}
	return len(la) < len(lb)
}
