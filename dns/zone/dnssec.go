package zone

import (
	"fmt"
	"slices"

	"github.com/miekg/dns"
)

// presigned are the types an online-signed zone makes itself; zone data must not carry them.
var presigned = map[uint16]bool{dns.TypeDNSKEY: true, dns.TypeRRSIG: true, dns.TypeNSEC: true,
	dns.TypeNSEC3: true, dns.TypeNSEC3PARAM: true}

// checkUnsigned rejects DNSSEC records in the data of a zone that is signed online.
func (z *Zone) checkUnsigned() error {
	for owner, node := range z.nodes {
		for t := range node {
			if presigned[t] {
				return fmt.Errorf("record %s %s: the zone is signed online (dnssec:), so it makes its own DNSKEY, RRSIG and NSEC records; remove it from the zone data",
					owner, dns.TypeToString[t])
			}
		}
	}
	return nil
}

// Types returns the sorted types of the records at the lowercased name, from the name itself or
// the wildcard that synthesises it; nil for empty non-terminals, names that do not exist and
// dynamic names (whose types the policy's sites decide). A compact-denial NSEC lists them.
func (z *Zone) Types(name string) []uint16 {
	node, ok := z.nodes[name]
	if !ok && !z.ents[name] && !z.dynamic[name] {
		node, ok = z.wildcard(name)
	}
	if !ok {
		return nil
	}
	out := make([]uint16, 0, len(node))
	for t := range node {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// DS returns the DS RRset at the delegation point cut, or nil (an insecure delegation).
func (z *Zone) DS(cut string) []dns.RR { return z.nodes[cut][dns.TypeDS] }
