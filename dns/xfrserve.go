package dns

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
)

// xfrMsgSize bounds one message of a transfer stream; TCP allows 65535, smaller messages keep
// a secondary's buffers and the TSIG work per message modest.
const xfrMsgSize = 16 << 10

// tsigFudge is the clock skew allowed on TSIG signatures (RFC 8945 recommends 300 s).
const tsigFudge = 300

// isXfrQuery reports, from the wire bytes alone and without allocating, whether raw is an AXFR
// or IXFR query: the TCP loop hands those to serveXfr, which may answer with many messages.
func isXfrQuery(raw []byte) bool {
	if len(raw) < 17 || raw[2]&0x80 != 0 || raw[2]&0x78 != 0 || binary.BigEndian.Uint16(raw[4:]) != 1 {
		return false
	}
	off := 12
	for off < len(raw) && raw[off] != 0 {
		if raw[off]&0xC0 != 0 {
			return false
		}
		off += int(raw[off]) + 1
	}
	if off+3 > len(raw) {
		return false
	}
	t := binary.BigEndian.Uint16(raw[off+1:])
	return t == mdns.TypeAXFR || t == mdns.TypeIXFR
}

// xfrReply starts a response to a transfer query.
func xfrReply(req *mdns.Msg) *mdns.Msg {
	m := new(mdns.Msg)
	m.Id, m.Response, m.Opcode, m.Question = req.Id, true, req.Opcode, req.Question
	if o := req.IsEdns0(); o != nil {
		ro := &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}}
		ro.SetUDPSize(1232)
		m.Extra = append(m.Extra, ro)
	}
	return m
}

// xfrAuthorize finds the zone of a transfer query and checks the address ACL and TSIG. On
// refusal it returns the response to send (REFUSED with EDE 18 "Prohibited", as NSD answers, or
// NOTAUTH with a TSIG error, RFC 8945 5.2) and a result label for the metrics.
func (s *Server) xfrAuthorize(st *state, req *mdns.Msg, raw []byte, src netip.Addr) (*xfrZone, *tsigKey, *mdns.Msg, string) {
	qname := strings.ToLower(req.Question[0].Name)
	refuse := func(ede uint16) (*xfrZone, *tsigKey, *mdns.Msg, string) {
		m := xfrReply(req)
		m.Rcode = mdns.RcodeRefused
		addEDE(m, ede)
		return nil, nil, m, "refused"
	}
	x := st.xfr[qname]
	if x == nil {
		if st.store.Find(qname) == nil {
			return refuse(mdns.ExtendedErrorCodeNotAuthoritative)
		}
		return refuse(mdns.ExtendedErrorCodeProhibited) // no transfer block, or not the apex
	}
	var key *tsigKey
	if t := req.IsTsig(); t != nil {
		k, ok := st.keys[strings.ToLower(t.Hdr.Name)]
		if !ok {
			return nil, nil, tsigError(req, t, mdns.RcodeBadKey), "notauth"
		}
		if err := mdns.TsigVerify(raw, k.secret, "", false); err != nil {
			code := mdns.RcodeBadSig
			if err == mdns.ErrTime {
				code = mdns.RcodeBadTime
			}
			s.log.Warn("dns transfer: bad TSIG", "zone", x.origin, "client", src.String(), "key", k.name, "err", err)
			return nil, nil, tsigError(req, t, code), "notauth"
		}
		key = &k
	}
	if x.key != "" && (key == nil || key.name != x.key) {
		return refuse(mdns.ExtendedErrorCodeProhibited)
	}
	if !x.allowed(src) {
		return refuse(mdns.ExtendedErrorCodeProhibited)
	}
	return x, key, nil, ""
}

// tsigError answers a request whose TSIG failed: NOTAUTH with an unsigned TSIG carrying the
// error (RFC 8945 5.2.1/5.2.2).
func tsigError(req *mdns.Msg, t *mdns.TSIG, code int) *mdns.Msg {
	m := xfrReply(req)
	m.Rcode = mdns.RcodeNotAuth
	m.Extra = append(m.Extra, &mdns.TSIG{
		Hdr:       mdns.RR_Header{Name: t.Hdr.Name, Rrtype: mdns.TypeTSIG, Class: mdns.ClassANY},
		Algorithm: t.Algorithm, TimeSigned: uint64(time.Now().Unix()), Fudge: tsigFudge,
		OrigId: req.Id, Error: uint16(code),
	})
	return m
}

// packSigned packs m, signed with key when it is set (prevMAC chains the messages of a stream;
// timersOnly for the messages after the first, RFC 8945 5.3.1). It returns the new MAC.
func packSigned(m *mdns.Msg, key *tsigKey, prevMAC string, timersOnly bool) ([]byte, string, error) {
	m.Compress = true
	if key == nil {
		b, err := m.Pack()
		return b, "", err
	}
	m.SetTsig(key.name, key.algorithm, tsigFudge, time.Now().Unix())
	return mdns.TsigGenerate(m, key.secret, prevMAC, timersOnly)
}

// requestMAC returns the MAC of a signed request, which the first signed answer covers.
func requestMAC(req *mdns.Msg, key *tsigKey) string {
	if t := req.IsTsig(); t != nil && key != nil {
		return t.MAC
	}
	return ""
}

// serveXfr answers one AXFR or IXFR query on a TCP connection with the whole transfer stream.
// An error means the connection is unusable and must be closed.
func (s *Server) serveXfr(c net.Conn, raw []byte, src netip.Addr) error {
	st := s.state.Load()
	req := new(mdns.Msg)
	if err := req.Unpack(raw); err != nil || countsLie(raw, req) {
		return writeFrame(c, headerOnly(raw, mdns.RcodeFormatError))
	}
	qtype := req.Question[0].Qtype
	x, key, refusal, result := s.xfrAuthorize(st, req, raw, src)
	if refusal != nil {
		label := "-" // a zone we serve, never the asked name: the label set stays bounded
		if z := st.store.Find(strings.ToLower(req.Question[0].Name)); z != nil {
			label = z.Origin
		}
		s.ops.transfers.WithLabelValues(label, mdns.TypeToString[qtype], result).Inc()
		s.log.Info("dns transfer refused", "zone", req.Question[0].Name, "type", mdns.TypeToString[qtype],
			"client", src.String(), "rcode", mdns.RcodeToString[refusal.Rcode])
		b, _, err := packSigned(refusal, nil, "", false)
		if err != nil {
			return err
		}
		return writeFrame(c, b)
	}
	var since uint32
	if qtype == mdns.TypeIXFR {
		soa, ok := ixfrSerial(req)
		if !ok {
			return writeFrame(c, headerOnly(raw, mdns.RcodeFormatError))
		}
		since = soa
	}
	rrs, kind := x.records(qtype == mdns.TypeIXFR, since)
	msgs, err := s.writeXfr(c, req, rrs, key)
	result = "ok"
	if err != nil {
		result = "error"
	}
	s.ops.transfers.WithLabelValues(x.origin, kind, result).Inc()
	s.log.Info("dns zone transfer", "zone", x.origin, "type", kind, "client", src.String(), "serial", x.soa.Serial,
		"from_serial", since, "records", len(rrs), "messages", msgs, "tsig", key != nil, "err", err)
	return err
}

// ixfrSerial returns the serial of the SOA an IXFR query carries in its authority section.
func ixfrSerial(req *mdns.Msg) (uint32, bool) {
	if len(req.Ns) != 1 {
		return 0, false
	}
	soa, ok := req.Ns[0].(*mdns.SOA)
	if !ok {
		return 0, false
	}
	return soa.Serial, true
}

// writeXfr sends rrs as a stream of messages of at most xfrMsgSize bytes, each signed when key is
// set, and returns how many it sent.
func (s *Server) writeXfr(c net.Conn, req *mdns.Msg, rrs []mdns.RR, key *tsigKey) (int, error) {
	mac := requestMAC(req, key)
	qlen := 12
	for _, q := range req.Question {
		qlen += len(q.Name) + 5
	}
	sent := 0
	for len(rrs) > 0 {
		m := xfrReply(req)
		m.Authoritative = true
		m.Extra = nil // the OPT goes in the first message only
		if sent == 0 {
			m.Extra = xfrReply(req).Extra
		}
		size, n := qlen, 0
		for n < len(rrs) && (n == 0 || size+mdns.Len(rrs[n]) <= xfrMsgSize) {
			size += mdns.Len(rrs[n])
			n++
		}
		m.Answer = rrs[:n]
		rrs = rrs[n:]
		b, next, err := packSigned(m, key, mac, sent > 0)
		if err != nil {
			return sent, fmt.Errorf("pack transfer message: %w", err)
		}
		mac = next
		if err := writeFrame(c, b); err != nil {
			return sent, err
		}
		sent++
	}
	return sent, nil
}

// writeFrame writes one length-prefixed DNS message on a TCP connection.
func writeFrame(c net.Conn, b []byte) error {
	frame := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(frame, uint16(len(b)))
	copy(frame[2:], b)
	c.SetWriteDeadline(time.Now().Add(tcpIdle))
	_, err := c.Write(frame)
	return err
}

// xfrOverUDP answers a transfer query that came over UDP (or that the TCP fast check did not
// recognise): AXFR needs TCP (NOTIMP, as NSD and Knot answer); an authorised IXFR gets the current SOA alone,
// which tells the secondary whether it is current or must come back over TCP (RFC 1995 2).
func (s *Server) xfrOverUDP(st *state, req *mdns.Msg, raw []byte, src netip.Addr, oc *outcome) ([]byte, *outcome) {
	q := req.Question[0]
	m := xfrReply(req)
	var key *tsigKey
	switch {
	case q.Qtype == mdns.TypeAXFR:
		m.Rcode = mdns.RcodeNotImplemented // as NSD and Knot answer: AXFR needs TCP
	default:
		x, k, refusal, _ := s.xfrAuthorize(st, req, raw, src)
		if refusal != nil {
			m = refusal
			break
		}
		if _, ok := ixfrSerial(req); !ok {
			m.Rcode = mdns.RcodeFormatError
			break
		}
		key = k
		m.Authoritative = true
		m.Answer = []mdns.RR{x.soa}
		oc.name = x.origin
		s.ops.transfers.WithLabelValues(x.origin, "IXFR-udp-soa", "ok").Inc()
	}
	oc.rcode = m.Rcode
	b, _, err := packSigned(m, key, requestMAC(req, key), false)
	if err != nil {
		return headerOnly(raw, mdns.RcodeServerFailure), oc
	}
	return b, oc
}

// tsigRoom is kept free for the TSIG record when a signed answer is truncated to fit.
const tsigRoom = 128

// packTSIG verifies the TSIG of an ordinary query and packs the answer signed with the same key;
// an unknown key or a bad signature gets NOTAUTH (RFC 8945 5.2). Signed answers are unique, so
// they are never cached.
func (s *Server) packTSIG(st *state, req *mdns.Msg, raw []byte, t *mdns.TSIG, resp *mdns.Msg, limit int, oc *outcome) []byte {
	oc.cacheable = false
	k, ok := st.keys[strings.ToLower(t.Hdr.Name)]
	code := mdns.RcodeBadKey
	if ok {
		err := mdns.TsigVerify(raw, k.secret, "", false)
		switch {
		case err == nil:
			code = 0
		case err == mdns.ErrTime:
			code = mdns.RcodeBadTime
		default:
			code = mdns.RcodeBadSig
		}
	}
	if code != 0 {
		m := tsigError(req, t, code)
		oc.rcode = m.Rcode
		b, _ := m.Pack()
		return b
	}
	if resp.Len()+tsigRoom > limit {
		truncate(resp, limit-tsigRoom)
		oc.trunc = resp.Truncated
	}
	b, _, err := packSigned(resp, &k, t.MAC, false)
	if err != nil {
		s.log.Warn("pack signed dns response", "err", err, "question", resp.Question)
		return headerOnly(raw, mdns.RcodeServerFailure)
	}
	return b
}
