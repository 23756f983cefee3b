package dns

import (
	mdns "github.com/miekg/dns"
)

// truncate fits resp into limit bytes without ever sending part of an RRset. When the answer or
// authority section does not fit, the response keeps only the question and OPT, with TC=1, as
// NSD does: a partial RRset could be cached as if it were whole. When only additional records
// are cut, whole RRsets of them are kept and TC stays clear (RFC 2181 9), except for a referral,
// whose glue is required (RFC 9471).
func truncate(resp *mdns.Msg, limit int) {
	nAns, nNs := len(resp.Answer), len(resp.Ns)
	var opt mdns.RR
	extra := make([]mdns.RR, 0, len(resp.Extra))
	for _, rr := range resp.Extra {
		if rr.Header().Rrtype == mdns.TypeOPT {
			opt = rr
		} else {
			extra = append(extra, rr)
		}
	}
	referral := !resp.Authoritative && nNs > 0
	resp.Truncate(limit)
	kept := len(resp.Extra)
	if opt != nil {
		kept--
	}
	if len(resp.Answer) == nAns && len(resp.Ns) == nNs && !referral {
		resp.Truncated = false
		resp.Extra = append(resp.Extra[:0], extra[:wholeSets(extra, kept)]...)
	} else {
		resp.Truncated = true
		resp.Answer, resp.Ns, resp.Extra = nil, nil, resp.Extra[:0]
	}
	if opt != nil {
		resp.Extra = append(resp.Extra, opt)
	}
}

// wholeSets returns how many of the first n records of rrs remain when an RRset cut at n is
// dropped completely (the records of one RRset are adjacent, its RRSIGs right after them, and
// a set is kept with its signatures or not at all).
func wholeSets(rrs []mdns.RR, n int) int {
	for n > 0 && n < len(rrs) && sameSet(rrs[n-1], rrs[n]) {
		n--
	}
	return n
}

func sameSet(a, b mdns.RR) bool {
	ha, hb := a.Header(), b.Header()
	return setType(a) == setType(b) && ha.Class == hb.Class && ha.Name == hb.Name
}

// setType is the type of the RRset rr belongs to: an RRSIG goes with the set it covers.
func setType(rr mdns.RR) uint16 {
	if sig, ok := rr.(*mdns.RRSIG); ok {
		return sig.TypeCovered
	}
	return rr.Header().Rrtype
}
