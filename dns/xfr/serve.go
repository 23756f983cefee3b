package xfr

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/dns/internal/wire"
)

// Server answers transfer queries and notifies secondaries for a DNS server, with its log and
// its metrics.
type Server struct {
	// Log receives a line per transfer, refusal and NOTIFY.
	Log *slog.Logger
	// Transfers counts transfers by zone, type and result (switchyard_dns_transfers_total).
	Transfers *prometheus.CounterVec
	// Notifies counts NOTIFY messages by zone, target and result (switchyard_dns_notifies_total).
	Notifies *prometheus.CounterVec
	// WriteTimeout bounds the write of one message of a transfer stream.
	WriteTimeout time.Duration
}

// xfrMsgSize bounds one message of a transfer stream; TCP allows 65535, smaller messages keep
// a secondary's buffers and the TSIG work per message modest.
const xfrMsgSize = 16 << 10

// tsigFudge is the clock skew allowed on TSIG signatures (RFC 8945 recommends 300 s).
const tsigFudge = 300

// IsQuery reports, from the wire bytes alone and without allocating, whether raw is an AXFR or
// IXFR query: the TCP loop hands those to ServeTCP, which may answer with many messages.
func IsQuery(raw []byte) bool {
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
func (s *Server) xfrAuthorize(t *Set, req *mdns.Msg, raw []byte, src netip.Addr) (*Zone, *Key, *mdns.Msg, string) {
	qname := strings.ToLower(req.Question[0].Name)
	refuse := func(ede uint16) (*Zone, *Key, *mdns.Msg, string) {
		m := xfrReply(req)
		m.Rcode = mdns.RcodeRefused
		wire.AddEDE(m, ede)
		return nil, nil, m, "refused"
	}
	x := t.zones[qname]
	if x == nil {
		if t.store.Find(qname) == nil {
			return refuse(mdns.ExtendedErrorCodeNotAuthoritative)
		}
		return refuse(mdns.ExtendedErrorCodeProhibited) // no transfer block, or not the apex
	}
	var key *Key
	if sig := req.IsTsig(); sig != nil {
		k, code := t.verify(raw, sig)
		if k == nil {
			s.Log.Warn("dns transfer: bad TSIG", "zone", x.origin, "client", src.String(), "key", sig.Hdr.Name,
				"error", mdns.RcodeToString[code])
			return nil, nil, tsigError(req, sig, code), "notauth"
		}
		key = k
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
		Hdr: mdns.RR_Header{Name: t.Hdr.Name, Rrtype: mdns.TypeTSIG, Class: mdns.ClassANY},
		// A TSIG with empty RDATA unpacks to an empty algorithm, which would pack to no
		// name at all and leave the answer unparsable: echo it as the root name.
		Algorithm: mdns.Fqdn(t.Algorithm), TimeSigned: uint64(time.Now().Unix()), Fudge: tsigFudge,
		OrigId: req.Id, Error: uint16(code),
	})
	return m
}

// packSigned packs m, signed with key when it is set (prevMAC chains the messages of a stream;
// timersOnly for the messages after the first, RFC 8945 5.3.1). It returns the new MAC.
func packSigned(m *mdns.Msg, key *Key, prevMAC string, timersOnly bool) ([]byte, string, error) {
	m.Compress = true
	if key == nil {
		b, err := m.Pack()
		return b, "", err
	}
	m.SetTsig(key.name, key.algorithm, tsigFudge, time.Now().Unix())
	return mdns.TsigGenerate(m, key.secret, prevMAC, timersOnly)
}

// requestMAC returns the MAC of a signed request, which the first signed answer covers.
func requestMAC(req *mdns.Msg, key *Key) string {
	if t := req.IsTsig(); t != nil && key != nil {
		return t.MAC
	}
	return ""
}

// ServeTCP answers one AXFR or IXFR query raw from src on a TCP connection with the whole
// transfer stream of the zone in t. An error means the connection is unusable and must be closed.
func (s *Server) ServeTCP(c net.Conn, raw []byte, src netip.Addr, t *Set) error {
	req := new(mdns.Msg)
	if err := req.Unpack(raw); err != nil || wire.CountsLie(raw, req) {
		return s.writeFrame(c, wire.HeaderOnly(raw, mdns.RcodeFormatError))
	}
	qtype := req.Question[0].Qtype
	x, key, refusal, result := s.xfrAuthorize(t, req, raw, src)
	if refusal != nil {
		label := "-" // a zone we serve, never the asked name: the label set stays bounded
		if z := t.store.Find(strings.ToLower(req.Question[0].Name)); z != nil {
			label = z.Origin
		}
		s.Transfers.WithLabelValues(label, mdns.TypeToString[qtype], result).Inc()
		s.Log.Info("dns transfer refused", "zone", req.Question[0].Name, "type", mdns.TypeToString[qtype],
			"client", src.String(), "rcode", mdns.RcodeToString[refusal.Rcode])
		b, _, err := packSigned(refusal, nil, "", false)
		if err != nil {
			return err
		}
		return s.writeFrame(c, b)
	}
	var since uint32
	if qtype == mdns.TypeIXFR {
		soa, ok := ixfrSerial(req)
		if !ok {
			return s.writeFrame(c, wire.HeaderOnly(raw, mdns.RcodeFormatError))
		}
		since = soa
	}
	rrs, kind := x.records(qtype == mdns.TypeIXFR, since)
	msgs, err := s.writeXfr(c, req, rrs, key)
	result = "ok"
	if err != nil {
		result = "error"
	}
	s.Transfers.WithLabelValues(x.origin, kind, result).Inc()
	s.Log.Info("dns zone transfer", "zone", x.origin, "type", kind, "client", src.String(), "serial", x.soa.Serial,
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
func (s *Server) writeXfr(c net.Conn, req *mdns.Msg, rrs []mdns.RR, key *Key) (int, error) {
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
		if err := s.writeFrame(c, b); err != nil {
			return sent, err
		}
		sent++
	}
	return sent, nil
}

// writeFrame writes one length-prefixed DNS message on a TCP connection.
func (s *Server) writeFrame(c net.Conn, b []byte) error {
	frame := make([]byte, 2+len(b))
	binary.BigEndian.PutUint16(frame, uint16(len(b)))
	copy(frame[2:], b)
	c.SetWriteDeadline(time.Now().Add(s.WriteTimeout))
	_, err := c.Write(frame)
	return err
}

// AnswerUDP answers a transfer query that came over UDP (or that the TCP fast check did not
// recognise): AXFR needs TCP (NOTIMP, as NSD and Knot answer); an authorised IXFR gets the current SOA alone,
// which tells the secondary whether it is current or must come back over TCP (RFC 1995 2). It
// returns the answer, its rcode, and the origin of the zone when the answer is the SOA ("" else).
func (s *Server) AnswerUDP(t *Set, req *mdns.Msg, raw []byte, src netip.Addr) (b []byte, rcode int, origin string) {
	q := req.Question[0]
	m := xfrReply(req)
	var key *Key
	switch {
	case q.Qtype == mdns.TypeAXFR:
		m.Rcode = mdns.RcodeNotImplemented // as NSD and Knot answer: AXFR needs TCP
	default:
		x, k, refusal, _ := s.xfrAuthorize(t, req, raw, src)
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
		origin = x.origin
		s.Transfers.WithLabelValues(x.origin, "IXFR-udp-soa", "ok").Inc()
	}
	b, _, err := packSigned(m, key, requestMAC(req, key), false)
	if err != nil {
		return wire.HeaderOnly(raw, mdns.RcodeServerFailure), m.Rcode, origin
	}
	return b, m.Rcode, origin
}

// TSIGRoom is kept free for the TSIG record when a signed answer is truncated to fit.
const TSIGRoom = 128

// VerifyTSIG checks the TSIG sig of the message req (wire raw: a query, a transfer request or an
// update) against the keys of t. It returns the key to sign the answer with, or, for an unknown
// key or a bad signature, the NOTAUTH answer to send instead (RFC 8945 5.2). Signed answers are
// unique: they are never cached.
func (t *Set) VerifyTSIG(req *mdns.Msg, raw []byte, sig *mdns.TSIG) (*Key, *mdns.Msg) {
	k, code := t.verify(raw, sig)
	if code != mdns.RcodeSuccess {
		return nil, tsigError(req, sig, code)
	}
	return k, nil
}

// verify checks sig over raw: the key, or the TSIG error (BADKEY, BADSIG, BADTIME).
func (t *Set) verify(raw []byte, sig *mdns.TSIG) (*Key, int) {
	k, ok := t.keys[strings.ToLower(sig.Hdr.Name)]
	// A key is its name and its algorithm (RFC 8945 5.2.1): the secret of a SHA-256 key does not
	// sign with SHA-512.
	if !ok || !strings.EqualFold(mdns.Fqdn(sig.Algorithm), k.algorithm) {
		return nil, mdns.RcodeBadKey
	}
	switch err := mdns.TsigVerify(raw, k.secret, "", false); {
	case err == nil:
		return &k, mdns.RcodeSuccess
	case err == mdns.ErrTime:
		return nil, mdns.RcodeBadTime
	default:
		return nil, mdns.RcodeBadSig
	}
}

// Client returns what a miekg/dns client or transfer takes to sign with k and check the
// answers: the secrets by key name, and the algorithm for Msg.SetTsig.
func (k *Key) Client() (secrets map[string]string, algorithm string) {
	return map[string]string{k.name: k.secret}, k.algorithm
}

// Name returns the key's wire name (fully qualified, lowercased), as config.KeyName makes it.
func (k *Key) Name() string { return k.name }

// Sign packs the answer m signed with k, covering requestMAC, the MAC of the signed query
// (RFC 8945 5.3).
func (k *Key) Sign(m *mdns.Msg, requestMAC string) ([]byte, error) {
	b, _, err := packSigned(m, k, requestMAC, false)
	return b, err
}
