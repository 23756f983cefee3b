package dns

import (
	"fmt"
	"slices"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnssec"
	"github.com/switchyard/switchyard/dns/keyroll"
	"github.com/switchyard/switchyard/dns/zone"
)

// signerKeys returns the zone builder's KeysFunc (zone.Build): it loads each signed zone's
// DNSSEC keys (a key policy's advanced at now for the zone's largest TTL), records its signer
// in signers and returns the DNSKEY RRset the zone publishes; a missing or bad key fails the
// build, so a reload keeps the old zones.
func (s *Server) signerKeys(cfg *config.Config, now time.Time, signers map[string]*dnssec.Signer) zone.KeysFunc {
	return func(zc *config.Zone, maxTTL uint32) ([]mdns.RR, error) {
		sg, cds, err := s.newSigner(cfg, zc, now, maxTTL)
		if err != nil {
			return nil, fmt.Errorf("field dnssec: %w", err)
		}
		sg.Stats = &s.sigStats
		sg.Now = s.now
		if st := s.state.Load(); st != nil {
			sg.KeepCache(st.signers[zc.Origin]) // same keys: the signatures made stay good
		}
		signers[zc.Origin] = sg
		keys := append(slices.Clone(sg.DNSKEYs()), cds...)
		if sg.NSEC3 {
			keys = append(keys, dnssec.NSEC3PARAM(zc.Origin, 0))
		}
		return keys, nil
	}
}

// newSigner makes zc's signer: from its key files, or from its key policy's keys at now,
// the policy advanced first (keys generated, rollovers scheduled for the zone's largest TTL
// maxTTL: keys.go); the second value is the policy's CDS and CDNSKEY records.
func (s *Server) newSigner(cfg *config.Config, zc *config.Zone, now time.Time, maxTTL uint32) (*dnssec.Signer, []mdns.RR, error) {
	d := zc.DNSSEC
	if d.Policy == nil {
		sg, err := dnssec.New(zc.Origin, d, cfg.Dir)
		return sg, nil, err
	}
	r, st, err := s.advanceKeys(cfg, zc, now, maxTTL)
	if err != nil {
		return nil, nil, err
	}
	ks, cds, err := r.KeySet(st, now)
	if err != nil {
		return nil, nil, err
	}
	return dnssec.NewFromKeys(zc.Origin, d, ks), keyroll.CDS(zc.Origin, d.DNSKEYTTL, cds), nil
}

// signAnswer turns resp, the answer to a DO=1 query for a signed zone, into a signed one: a
// negative answer gets its compact-denial NSEC (RFC 9824; NXDOMAIN becomes NOERROR with an NSEC
// listing NXNAME, unless the query set CO, which restores the NXDOMAIN rcode), a referral the DS
// or NSEC that proves it secure or insecure, and every authoritative RRset of the three sections
// its RRSIG. oc.expires is set to when the signatures are due for renewal, so a cached copy of
// this answer is dropped then.
func (s *Server) signAnswer(st *state, sg *dnssec.Signer, z *zone.Zone, resp *mdns.Msg, kind zone.Kind,
	qname string, qtype uint16, co bool, oc *outcome) error {
	last := qname // the name the rcode and NSEC speak of: the end of the CNAME chain (RFC 6604)
	for _, rr := range resp.Answer {
		if c, ok := rr.(*mdns.CNAME); ok && strings.EqualFold(c.Hdr.Name, last) {
			last = strings.ToLower(c.Target)
		}
	}
	negTTL := func() uint32 { return resp.Ns[0].Header().Ttl } // the SOA's, already RFC 2308-capped
	var unsigned map[mdns.RR]bool                              // a referral's NS set and glue
	switch {
	case kind == zone.NXDomain && sg.NSEC3:
		resp.Ns = append(resp.Ns, nsec3NXDomain(st, z, last, negTTL())...)
	case kind == zone.NXDomain:
		resp.Ns = append(resp.Ns, dnssec.NSEC(last, negTTL(), []uint16{mdns.TypeNXNAME}))
		if !co {
			resp.Rcode = mdns.RcodeSuccess
		}
	case (kind == zone.NoData || kind == zone.Dynamic && isNegative(resp)) && sg.NSEC3:
		resp.Ns = append(resp.Ns, nsec3NoData(st, z, last, qtype, negTTL())...)
	case kind == zone.NoData || kind == zone.Dynamic && isNegative(resp):
		types := typesAt(st, z, last)
		nsec := dnssec.NSEC(last, negTTL(), without(types, qtype))
		if qtype == mdns.TypeNSEC && last == qname {
			// Asked for the NSEC itself: it exists (it is made for every name), so it is the
			// answer; a NODATA proof would list the very type it denies.
			resp.Answer, resp.Ns = append(resp.Answer, nsec), nil
			break
		}
		resp.Ns = append(resp.Ns, nsec)
	case kind == zone.Referral:
		unsigned = map[mdns.RR]bool{}
		for _, rr := range resp.Ns {
			unsigned[rr] = true
		}
		for _, rr := range resp.Extra {
			unsigned[rr] = true
		}
		cut := resp.Ns[0].Header().Name
		switch ds := z.DS(cut); {
		case len(ds) > 0:
			resp.Ns = append(resp.Ns, ds...)
		case sg.NSEC3:
			// No DS: the NSEC3 of the cut proves the delegation insecure (NS, no DS bit).
			resp.Ns = append(resp.Ns, dnssec.NSEC3Match(z.Origin, cut, z.Negative().Header().Ttl, z.Types(cut)))
		default:
			// No DS: the NSEC at the cut proves the delegation insecure (NS, no DS bit).
			resp.Ns = append(resp.Ns, dnssec.NSEC(cut, z.Negative().Header().Ttl, z.Types(cut)))
		}
	case kind == zone.Answer && sg.NSEC3:
		// An answer a wildcard made: the proof that no closer name exists (RFC 5155 7.2.6).
		if ce, wild := z.Encloser(qname); wild {
			resp.Ns = append(resp.Ns, dnssec.NSEC3Cover(z.Origin, nextCloser(qname, ce), z.Negative().Header().Ttl))
		}
	}
	if co {
		if opt := resp.IsEdns0(); opt != nil {
			opt.SetCo(true)
		}
	}
	skip := func(rr mdns.RR) bool { return unsigned[rr] }
	var until int64
	for _, sec := range []*[]mdns.RR{&resp.Answer, &resp.Ns, &resp.Extra} {
		out, u, err := sg.SignSection(*sec, skip)
		if err != nil {
			return err
		}
		*sec = out
		if u != 0 && (until == 0 || u < until) {
			until = u
		}
	}
	oc.expires = until
	return nil
}

// isNegative reports whether resp's authority section holds the SOA of a NODATA answer.
func isNegative(resp *mdns.Msg) bool {
	return len(resp.Ns) > 0 && resp.Ns[0].Header().Rrtype == mdns.TypeSOA
}

// dynamicTypes are the types a dynamic name has: A and AAAA when a site has such addresses.
func dynamicTypes(st *state, name string) []uint16 {
	var out []uint16
	n := st.names[name]
	v4, v6 := false, false
	for _, site := range n.Sites {
		v4 = v4 || len(site.V4) > 0
		v6 = v6 || len(site.V6) > 0
	}
	if v4 {
		out = append(out, mdns.TypeA)
	}
	if v6 {
		out = append(out, mdns.TypeAAAA)
	}
	return out
}

// without returns types minus t (a NODATA answer's NSEC must not claim the asked type).
func without(types []uint16, t uint16) []uint16 {
	out := make([]uint16, 0, len(types))
	for _, x := range types {
		if x != t {
			out = append(out, x)
		}
	}
	return out
}

// registerSignMetrics exposes the signing work: signatures made (cache misses, one per key) and
// RRsets answered from the signature cache. Their ratio shows whether hot answers are re-signed.
func registerSignMetrics(r *prometheus.Registry, st *dnssec.Stats) error {
	for _, c := range []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "switchyard_dns_dnssec_signatures_total",
			Help: "RRSIGs made by the online signer (signature cache misses, one per signing key).",
		}, func() float64 { return float64(st.Signed.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "switchyard_dns_dnssec_signature_cache_hits_total",
			Help: "RRsets whose signatures came from the signature cache.",
		}, func() float64 { return float64(st.Hits.Load()) }),
	} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("register dns metrics: %w", err)
		}
	}
	return nil
}

// DNSSECSummary describes the signed zones for `switchyard dns check`: origin, keys by tag and
// role, and the DS records for the parent.
func (s *Server) DNSSECSummary() []string {
	st := s.state.Load()
	var out []string
	for _, z := range st.store.Zones() {
		sg := st.signers[z.Origin]
		if sg == nil {
			continue
		}
		zsks, ksks := sg.Keys()
		var algs []string // two in an algorithm rollover
		for _, k := range zsks {
			if a := fmt.Sprint(k.DNSKEY.Algorithm); !slices.Contains(algs, a) {
				algs = append(algs, a)
			}
		}
		line := fmt.Sprintf("dnssec %s: signed online, algorithm %s, %d DNSKEYs, zone signed by", z.Origin, strings.Join(algs, " and "), len(sg.DNSKEYs()))
		for _, k := range zsks {
			line += fmt.Sprintf(" %d", k.Tag)
		}
		line += ", DNSKEY signed by"
		for _, k := range ksks {
			line += fmt.Sprintf(" %d", k.Tag)
		}
		out = append(out, line)
		for _, k := range ksks {
			out = append(out, "  DS for the parent: "+k.DS().String())
		}
	}
	return out
}

// typesAt are the types name has in z: a dynamic name's from its sites.
func typesAt(st *state, z *zone.Zone, name string) []uint16 {
	if z.IsDynamic(name) {
		return dynamicTypes(st, name)
	}
	return z.Types(name)
}

// nextCloser is the name one label longer than the closest encloser ce on the way to qname.
func nextCloser(qname, ce string) string {
	labels := mdns.SplitDomainName(qname)
	n := len(labels) - mdns.CountLabel(ce) - 1
	return mdns.Fqdn(strings.Join(labels[n:], "."))
}

// nsec3NXDomain is the NSEC3 proof that name does not exist (RFC 5155 7.2.2): its closest
// encloser matched, the next closer name covered, and the wildcard at the encloser covered.
func nsec3NXDomain(st *state, z *zone.Zone, name string, ttl uint32) []mdns.RR {
	ce, _ := z.Encloser(name)
	return []mdns.RR{dnssec.NSEC3Match(z.Origin, ce, ttl, typesAt(st, z, ce)),
		dnssec.NSEC3Cover(z.Origin, nextCloser(name, ce), ttl),
		dnssec.NSEC3Cover(z.Origin, "*."+ce, ttl)}
}

// nsec3NoData is the NSEC3 proof that name has no record of qtype (RFC 5155 7.2.3), or, for a
// name a wildcard answers, that neither the name nor the wildcard has one (7.2.5).
func nsec3NoData(st *state, z *zone.Zone, name string, qtype uint16, ttl uint32) []mdns.RR {
	ce, wild := z.Encloser(name)
	if !wild {
		return []mdns.RR{dnssec.NSEC3Match(z.Origin, name, ttl, without(typesAt(st, z, name), qtype))}
	}
	return []mdns.RR{dnssec.NSEC3Match(z.Origin, ce, ttl, typesAt(st, z, ce)),
		dnssec.NSEC3Cover(z.Origin, nextCloser(name, ce), ttl),
		dnssec.NSEC3Match(z.Origin, "*."+ce, ttl, without(z.Types("*."+ce), qtype))}
}
