package zone

import (
	"github.com/miekg/dns"
)

// presigned are the types an online-signed zone makes itself; zone data must not carry them.
var presigned = map[uint16]bool{dns.TypeDNSKEY: true, dns.TypeRRSIG: true, dns.TypeNSEC: true,
	dns.TypeNSEC3: true, dns.TypeNSEC3PARAM: true}

// Types returns the sorted types of the records at the lowercased name, from the name itself or
// the wildcard that synthesises it; nil for empty non-terminals, names that do not exist and
// dynamic names (whose types the policy's sites decide). A compact-denial NSEC lists them.
func (z *Zone) Types(name string) []uint16 {
	n, ent := z.node(name)
	if !n.exists() && !ent && !z.dynamic[name] {
		n = z.wildcard(name)
	}
	if !n.exists() {
		return nil
	}
	return n.types()
}

// DS returns the DS RRset at the delegation point cut, or nil (an insecure delegation).
func (z *Zone) DS(cut string) []dns.RR {
	n, _ := z.node(cut)
	s, _ := n.set(dns.TypeDS)
	return z.shared(s, cut)
}
