package dns

import (
	"net/netip"
	"strings"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/internal/wire"
	"github.com/switchyard/switchyard/dns/policy"
	"github.com/switchyard/switchyard/dns/xfr"
	"github.com/switchyard/switchyard/dns/zone"
)

// outcome describes one answered query for metrics and the query log.
type outcome struct {
	name   string // metric label: dynamic name, zone origin, or "-"
	qname  string
	qtype  uint16
	rcode  int
	reason string // policy decision, "" for static answers
	sites  string
	trunc  bool
	// cacheable is true when the response depends on nothing but the query bytes and, with
	// health set, the sites' health (a dynamic name whose policy is deterministic).
	cacheable bool
	health    bool
	// rotate is the weighted name answered, whose answers are cached per decision.
	rotate   *policy.Name
	decision policy.Decision
	// expires is when a signed answer's signatures are due for renewal (Unix seconds; 0: unsigned).
	expires int64
	// nxdomain is a static NXDOMAIN (zone data only): not cached here, but the XDP path packs it.
	nxdomain bool
	// zone is the zone copy that answered (nil when none did): its cached answer is stale once
	// a newer copy serves, unless deps says what it read and the updates since left that alone.
	zone *zone.Zone
	deps *answerDeps
}

// answerDeps is what a static positive answer reads of its zone, so that the cache can keep it
// across an update that changed none of it (zone.Zone.Unchanged).
type answerDeps struct {
	names   []string // the name asked, then the target of each CNAME of the answer
	qtype   uint16
	targets []string // the names whose addresses are its glue
}

// depsOf returns what res, the answer to qname/qtype, reads when the cache may keep it across
// updates: an answer of qtype records, after the CNAMEs that led to them if any, none
// synthesised from a wildcard; nil otherwise. The keys' records (DNSKEY, CDS, ...) change only
// with new keys, which start a new lineage.
func depsOf(res zone.Result, qname string, qtype uint16) *answerDeps {
	if res.Kind != zone.Answer || res.Wildcard || len(res.Answer) == 0 {
		return nil
	}
	d := &answerDeps{names: []string{qname}, qtype: qtype}
	for _, rr := range res.Answer {
		if c, ok := rr.(*mdns.CNAME); ok && qtype != mdns.TypeCNAME && qtype != mdns.TypeANY {
			d.names = append(d.names, strings.ToLower(c.Target))
			continue
		}
		if rr.Header().Rrtype != qtype && qtype != mdns.TypeANY {
			return nil
		}
		if target := zone.GlueTarget(rr); target != "" {
			d.targets = append(d.targets, target)
		}
	}
	return d
}

// Respond builds the wire response to the wire query raw from client src. It returns nil when the
// query must be dropped (too short to carry a header, or a response rather than a query). It is
// the whole message path, so the fuzz test drives it directly.
func (s *Server) Respond(raw []byte, src netip.Addr, tcp bool) []byte {
	return s.respondTo(nil, raw, src, tcp)
}

// respondTo is Respond writing a cached answer into dst's storage, so the UDP workers answer a
// cache hit without allocating; other answers are packed into new memory.
func (s *Server) respondTo(dst, raw []byte, src netip.Addr, tcp bool) []byte {
	st := s.state.Load()
	var key []byte
	var pre *policy.Decision
	var scratch [cacheKeyMax + rotateSigMax]byte
	if st.cache != nil && !st.cfg.QueryLog {
		key = cacheKey(scratch[:0], raw, tcp)
		healthGen, now := s.healthGen.Load(), s.unixNow()
		e := st.cache.get(key)
		if e != nil && e.rotate != nil && !e.fresh(healthGen, now) {
			e = nil // a weighted name of a replaced zone copy: decide nothing, answer anew
		}
		if e != nil && e.rotate != nil {
			// A weighted name: decide (the rotation advances), then look up the answer packed for
			// that decision.
			d := e.rotate.Decide("", st.health)
			pre = &d
			e = st.cache.get(rotateKey(key, d))
		}
		if e != nil && (e.fresh(healthGen, now) || e.carry(st) && e.fresh(healthGen, now)) {
			e.queries.Inc()
			if e.decisions != nil {
				e.decisions.Inc()
			}
			out := e.response(dst, raw)
			if e.xdp && s.xdp != nil {
				s.xdpRefill(st, e, raw, out)
			}
			return out
		}
	}
	// Read before deciding: a health change during the decision makes the entry stale at once.
	gen := s.healthGen.Load()
	out, oc := s.respond(raw, src, tcp, pre)
	if oc != nil {
		s.observe(oc, src)
		if key != nil && oc.cacheable {
			e := (&cacheEntry{queries: s.queryCounter(oc), decisions: s.decisionCounter(oc),
				health: oc.health, gen: gen, expires: oc.expires, deps: oc.deps}).of(oc.zone)
			if s.xdp != nil && !tcp && st.xdpGen != 0 && xdpStatic(oc) {
				e.xdp = true
				e.xdpAt.Store(s.unixNow())
				e.xdpGen.Store(st.xdpGen)
				s.xdp.fill(st.xdpGen, raw, out, e.queries)
			}
			st.cache.put(key, out, e)
		} else if key != nil && oc.nxdomain && s.xdp != nil && !tcp && st.xdpGen != 0 && xdpStaticNX(oc) {
			s.xdp.fill(st.xdpGen, raw, out, s.queryCounter(oc))
		}
		if key != nil && oc.rotate != nil {
			st.cache.put(key, nil, (&cacheEntry{rotate: oc.rotate}).of(oc.zone))
			st.cache.put(rotateKey(key, oc.decision), out, (&cacheEntry{queries: s.queryCounter(oc),
				decisions: s.decisionCounter(oc), expires: oc.expires}).of(oc.zone))
		}
	}
	return out
}

// rotateSigMax bounds the decision suffix of a weighted answer's key; decisions with more sites
// are not cached.
const rotateSigMax = 32

// rotateKey appends the decision (reason and site indices) to key, in key's spare capacity; nil
// when the decision does not fit.
func rotateKey(key []byte, d policy.Decision) []byte {
	if len(d.Reason)+len(d.Sites)+1 > rotateSigMax || len(key)+rotateSigMax > cap(key) {
		return nil
	}
	k := append(key, 0)
	k = append(k, d.Reason...)
	for _, i := range d.Sites {
		k = append(k, byte(i))
	}
	return k
}

// newReply starts the answer to req: the header fields a response echoes (RFC 1035 4.1.1,
// RFC 6840 5.9 for CD) and the question, and the outcome naming that question, so every early
// failure in respond answers with the same header.
func newReply(req *mdns.Msg) (*mdns.Msg, *outcome) {
	resp := new(mdns.Msg)
	resp.Id = req.Id
	resp.Response = true
	resp.Opcode = req.Opcode
	resp.RecursionDesired = req.RecursionDesired
	resp.CheckingDisabled = req.CheckingDisabled
	resp.Question = req.Question
	oc := &outcome{name: "-"}
	if len(req.Question) == 1 {
		oc.qname = req.Question[0].Name
		oc.qtype = req.Question[0].Qtype
	}
	return resp, oc
}

// signIfAsked signs the filled answer when the zone is signed and the query set DO; it is apart
// from respond because signing is the one step after lookup that can fail. On failure it logs,
// strips resp down to the OPT and returns false: the caller answers SERVFAIL rather than send
// unsigned data a validator would reject.
func (s *Server) signIfAsked(st *state, z *zone.Zone, resp *mdns.Msg, kind zone.Kind, qname string,
	q mdns.Question, e ednsQuery, oc *outcome) bool {
	sg := st.signers[z.Origin]
	if sg == nil || !e.do {
		return true
	}
	if err := s.signAnswer(st, sg, z, resp, kind, qname, q.Qtype, e.co, oc); err != nil {
		s.log.Warn("sign dns answer", "err", err, "question", q.String())
		resp.Answer, resp.Ns, resp.Extra = nil, nil, resp.Extra[:1] // keep the OPT only
		return false
	}
	// A compact NXDOMAIN depends on the query bytes alone, like NODATA: caching it spares
	// the lookup, the signature-cache lookups and the packing, which cost ~30x a cache hit.
	oc.cacheable = oc.cacheable || kind == zone.NXDomain
	return true
}

// respond answers raw; pre, when set, is the decision already made for a weighted name.
func (s *Server) respond(raw []byte, src netip.Addr, tcp bool, pre *policy.Decision) ([]byte, *outcome) {
	if len(raw) < 12 || raw[2]&0x80 != 0 {
		// No header, or QR set: answering responses would make the server a reflector.
		return nil, nil
	}
	st := s.state.Load()
	req := new(mdns.Msg)
	if err := req.Unpack(raw); err != nil || wire.CountsLie(raw, req) {
		// Compression loops, oversized labels, truncated sections and header counts larger than
		// the records present all land here (a header-only FORMERR, as NSD answers).
		return wire.HeaderOnly(raw, mdns.RcodeFormatError), &outcome{name: "-", rcode: mdns.RcodeFormatError}
	}
	resp, oc := newReply(req)
	// failEDE answers rcode with an Extended DNS Error (RFC 8914) when the query has EDNS;
	// ede 0 adds none.
	failEDE := func(rcode int, ede uint16) ([]byte, *outcome) {
		resp.Rcode = rcode
		oc.rcode = rcode
		if ede != 0 {
			wire.AddEDE(resp, ede)
		}
		return s.pack(resp, 512, oc), oc
	}
	fail := func(rcode int) ([]byte, *outcome) { return failEDE(rcode, 0) }
	if req.Opcode == mdns.OpcodeNotify {
		// Taken for secondary zones from their primaries; REFUSED otherwise, as NSD answers.
		return s.answerNotify(st, req, raw, src), nil
	}
	if req.Opcode == mdns.OpcodeUpdate {
		// Counted and logged by answerUpdate (switchyard_dns_updates_total), never cached.
		return s.answerUpdate(req, raw, src), nil
	}
	if req.Opcode != mdns.OpcodeQuery {
		return fail(mdns.RcodeNotImplemented)
	}
	if len(req.Question) == 1 && (req.Question[0].Qtype == mdns.TypeAXFR || req.Question[0].Qtype == mdns.TypeIXFR) {
		// An IXFR query carries a SOA in its authority section.
		b, rcode, origin := s.transfers.AnswerUDP(st.xfr, req, raw, src)
		if origin != "" {
			oc.name = origin
		}
		oc.rcode = rcode
		return b, oc
	}
	if len(req.Question) != 1 || len(req.Answer) != 0 || len(req.Ns) != 0 {
		return fail(mdns.RcodeFormatError)
	}

	e, rcode, ok := readEDNS(st, req, resp, src, tcp)
	if !ok {
		return fail(rcode)
	}
	limit, ecs, client, ecsBits := e.limit, e.ecs, e.client, e.ecsBits

	q := req.Question[0]
	if q.Qclass != mdns.ClassINET && q.Qclass != mdns.ClassANY {
		// CHAOS, HESIOD and unknown classes: REFUSED with "Not Supported", as NSD answers.
		return failEDE(mdns.RcodeRefused, mdns.ExtendedErrorCodeNotSupported)
	}
	// Meta types asked as questions (MAILA, MAILB, TKEY, OPT, TSIG, type 0) have no records at
	// any name: NODATA below, as NSD answers (Knot too, but NOTIMP for type 0).
	qname := strings.ToLower(q.Name)
	z := st.store.Find(qname)
	if len(st.down) > 0 {
		if o := downZone(st, qname, z); o != "" {
			// A secondary zone with no copy yet or an expired one: not data to trust.
			oc.name = o
			return fail(mdns.RcodeServerFailure)
		}
	}
	if z == nil {
		// Not authoritative and no recursion: REFUSED, as RFC 8906 expects, with EDE 20.
		return failEDE(mdns.RcodeRefused, mdns.ExtendedErrorCodeNotAuthoritative)
	}
	if q.Qtype == mdns.TypeNXNAME && st.signers[z.Origin] != nil {
		// NXNAME only lives in compact-denial bitmaps; asked for, it is FORMERR (RFC 9824 3.5).
		oc.name = z.Origin
		return failEDE(mdns.RcodeFormatError, mdns.ExtendedErrorCodeInvalidQueryType)
	}
	oc.zone = z
	kind := s.fillAnswer(st, resp, z, qname, q.Qtype, client, ecsBits, ecs, oc, pre)
	if !s.signIfAsked(st, z, resp, kind, qname, q, e, oc) {
		return fail(mdns.RcodeServerFailure)
	}
	oc.rcode = resp.Rcode
	if t := req.IsTsig(); t != nil {
		// A signed answer is never cached: its signature covers this query's MAC and time, and a
		// replayed query must be judged anew (a byte-identical one would hit the cache).
		oc.rotate, oc.cacheable = nil, false
		// A signed query (a secondary's SOA check) gets a signed answer (RFC 8945 5.3).
		return s.packTSIG(st, req, raw, t, resp, limit, oc), oc
	}
	// Packed for the lower-cased question, then the query's letter case copied back: the
	// compression of the answer's names then does not depend on the case of whoever asked first,
	// so a cached answer (and the XDP path's, xdp.go) is the same bytes whatever the case.
	resp.Question = []mdns.Question{{Name: qname, Qtype: q.Qtype, Qclass: q.Qclass}}
	return copyQuestionCase(s.pack(resp, limit, oc), raw), oc
}

// ednsQuery is what the query's OPT record asks of the answer.
type ednsQuery struct {
	limit   int                // the answer's size limit
	ecs     *mdns.EDNS0_SUBNET // the client subnet echoed in the answer, nil without one
	client  netip.Addr         // the address the policies decide for (the subnet's when given)
	ecsBits int                // the client subnet's source prefix length, -1 without one
	do, co  bool               // DNSSEC OK (RFC 3225) and Compact denial OK (RFC 9824) were set
}

// readEDNS reads the query's EDNS options and adds the answer's OPT record to resp. When the
// last result is false, the query is answered with the rcode it returns.
func readEDNS(st *state, req, resp *mdns.Msg, src netip.Addr, tcp bool) (ednsQuery, int, bool) {
	// EDNS (RFC 6891): one OPT with the root owner, version 0; BADVERS otherwise.
	var opt *mdns.OPT
	for _, rr := range req.Extra {
		if o, ok := rr.(*mdns.OPT); ok {
			if opt != nil || o.Hdr.Name != "." {
				return ednsQuery{}, mdns.RcodeFormatError, false
			}
			opt = o
		}
	}
	limit := 512
	var ecs *mdns.EDNS0_SUBNET
	client := src
	ecsBits := -1
	if tcp {
		limit = mdns.MaxMsgSize
	}
	if opt != nil {
		ro := &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}}
		ro.SetUDPSize(uint16(st.cfg.MaxUDPSize))
		if opt.Do() {
			ro.SetDo()
		}
		resp.Extra = append(resp.Extra, ro)
		if opt.Version() != 0 {
			return ednsQuery{}, mdns.RcodeBadVers, false
		}
		if !tcp {
			limit = max(512, min(int(opt.UDPSize()), st.cfg.MaxUDPSize))
		}
		for _, o := range opt.Option {
			if e, ok := o.(*mdns.EDNS0_SUBNET); ok {
				if ecs != nil {
					return ednsQuery{}, mdns.RcodeFormatError, false
				}
				ecs = e
			}
			// Other options (cookies, padding, unknown codes) are ignored, as RFC 6891 6.1.2 asks.
		}
		if ecs != nil {
			addr, ok := ecsAddr(ecs)
			if !ok {
				return ednsQuery{}, mdns.RcodeFormatError, false // RFC 7871 7.1.2
			}
			echo := &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET, Family: ecs.Family,
				SourceNetmask: ecs.SourceNetmask, Address: ecs.Address}
			ro.Option = append(ro.Option, echo)
			ecs = echo
			if ecs.SourceNetmask > 0 {
				client = addr
				ecsBits = int(ecs.SourceNetmask)
			}
		}
	}
	q := ednsQuery{limit: limit, ecs: ecs, client: client, ecsBits: ecsBits}
	if opt != nil {
		q.do, q.co = opt.Do(), opt.Co()
	}
	return q, 0, true
}

// fillAnswer fills resp with the zone's answer to qname and qtype (a policy decision for a
// dynamic name), records in oc what the answer may be cached by and returns the lookup's kind.
func (s *Server) fillAnswer(st *state, resp *mdns.Msg, z *zone.Zone, qname string, qtype uint16,
	client netip.Addr, ecsBits int, ecs *mdns.EDNS0_SUBNET, oc *outcome, pre *policy.Decision) zone.Kind {
	oc.name = z.Origin
	res := z.Lookup(qname, qtype)
	resp.Authoritative = true
	resp.Answer, resp.Ns = res.Answer, res.Ns
	resp.Extra = append(resp.Extra, res.Extra...)
	switch res.Kind {
	case zone.NXDomain:
		resp.Rcode = mdns.RcodeNameError
		oc.nxdomain = true
	case zone.Referral:
		resp.Authoritative = false
	case zone.Dynamic:
		n := st.names[res.DynamicName]
		oc.name = n.FQDN
		s.answerDynamic(st, resp, z, n, qtype, client, ecsBits, ecs, oc, pre)
		// Geolocation with a client subnet and failover decide by the query bytes and health
		// alone; weighted rotates and latency follows measured RTTs, so they are decided each time.
		oc.health = true
		oc.cacheable = n.Policy == config.PolicyFailover || n.Policy == config.PolicyGeolocation && ecsBits >= 0
		if n.Policy == config.PolicyWeighted && len(n.Sites) < 256 {
			oc.rotate = n // cached per decision: the query maps to the name, the decision to the answer
		}
	default:
		oc.cacheable = true // the ECS echo, if any, is made of query bytes
		oc.deps = depsOf(res, qname, qtype)
	}
	return res.Kind
}

// answerDynamic fills resp from the name's policy decision for client.
func (s *Server) answerDynamic(st *state, resp *mdns.Msg, z *zone.Zone, n *policy.Name, qtype uint16,
	client netip.Addr, ecsBits int, ecs *mdns.EDNS0_SUBNET, oc *outcome, pre *policy.Decision) {
	var c policy.Client
	if n.ClientDependent() {
		c = st.groups.Classify(client)
	}
	if ecs != nil {
		// The scope tells the resolver which clients may share this answer: the matched subnet's
		// or database network's prefix for client-dependent policies (policy.Client.Bits), the
		// whole internet (0) otherwise.
		switch {
		case !n.ClientDependent() || ecsBits < 0:
			ecs.SourceScope = 0
		case c.Bits >= 0 && (c.Group != "" || c.Located):
			ecs.SourceScope = uint8(c.Bits)
		default:
			ecs.SourceScope = uint8(ecsBits)
		}
	}
	var d policy.Decision
	if pre != nil && n.Policy == config.PolicyWeighted {
		d = *pre
	} else {
		d = n.DecideFor(c, st.health)
	}
	oc.decision = d
	oc.reason = d.Reason
	cname := resp.Answer // CNAMEs that led to the dynamic name, if any
	var names []string
	for _, i := range d.Sites {
		site := n.Sites[i]
		names = append(names, site.Name)
		addrs := site.V4
		if qtype == mdns.TypeAAAA {
			addrs = site.V6
		} else if qtype != mdns.TypeA && qtype != mdns.TypeANY {
			addrs = nil
		}
		for _, a := range addrs {
			hdr := mdns.RR_Header{Name: n.FQDN, Class: mdns.ClassINET, Ttl: n.TTL}
			if a.Is4() {
				hdr.Rrtype = mdns.TypeA
				resp.Answer = append(resp.Answer, &mdns.A{Hdr: hdr, A: a.AsSlice()})
			} else {
				hdr.Rrtype = mdns.TypeAAAA
				resp.Answer = append(resp.Answer, &mdns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
			}
		}
	}
	oc.sites = strings.Join(names, ",")
	if len(resp.Answer) == len(cname) {
		// NODATA: other types, or fail-closed with every site down. The negative TTL is capped by
		// the name's TTL so a recovered site is not hidden longer than a positive answer would be.
		soa := z.Negative()
		soa.Header().Ttl = min(soa.Header().Ttl, n.TTL)
		resp.Ns = []mdns.RR{soa}
	}
}

// ecsAddr validates an EDNS Client Subnet option and returns its address.
func ecsAddr(e *mdns.EDNS0_SUBNET) (netip.Addr, bool) {
	switch e.Family {
	case 1:
		a, ok := netip.AddrFromSlice(e.Address.To4())
		return a, ok && e.SourceNetmask <= 32 && e.SourceScope == 0
	case 2:
		a, ok := netip.AddrFromSlice(e.Address.To16())
		return a, ok && e.SourceNetmask <= 128 && e.SourceScope == 0
	case 0:
		// dig sends family 0 with prefix 0 for "+subnet=0": the client opts out of ECS.
		return netip.Addr{}, e.SourceNetmask == 0
	}
	return netip.Addr{}, false
}

// pack serialises resp within limit bytes, truncating (TC=1) when the answer does not fit so the
// client retries over TCP.
func (s *Server) pack(resp *mdns.Msg, limit int, oc *outcome) []byte {
	if resp.Len() > limit {
		truncate(resp, limit)
		oc.trunc = resp.Truncated
	}
	resp.Compress = true
	b, err := resp.Pack()
	if err != nil {
		s.log.Warn("pack dns response", "err", err, "question", resp.Question)
		resp.Answer, resp.Ns, resp.Extra = nil, nil, nil
		resp.Rcode = mdns.RcodeServerFailure
		oc.rcode = resp.Rcode
		b, _ = resp.Pack()
	}
	return b
}

// packTSIG verifies the TSIG of an ordinary query and packs the answer signed with the same key;
// an unknown key or a bad signature gets NOTAUTH (RFC 8945 5.2). Signed answers are unique, so
// they are never cached.
func (s *Server) packTSIG(st *state, req *mdns.Msg, raw []byte, t *mdns.TSIG, resp *mdns.Msg, limit int, oc *outcome) []byte {
	oc.cacheable = false
	k, refusal := st.xfr.VerifyTSIG(req, raw, t)
	if refusal != nil {
		oc.rcode = refusal.Rcode
		b, _ := refusal.Pack()
		return b
	}
	if resp.Len()+xfr.TSIGRoom > limit {
		truncate(resp, limit-xfr.TSIGRoom)
		oc.trunc = resp.Truncated
	}
	b, err := k.Sign(resp, t.MAC)
	if err != nil {
		s.log.Warn("pack signed dns response", "err", err, "question", resp.Question)
		return wire.HeaderOnly(raw, mdns.RcodeServerFailure)
	}
	return b
}
