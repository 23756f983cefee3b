// Package rfc2136 is a libdns provider that changes records by RFC 2136 dynamic update signed
// with TSIG: what an ACME DNS-01 solver (certmagic) needs to put its TXT records into a zone
// served by switchyard's DNS stop, or by any primary that takes updates (BIND, Knot, PowerDNS).
package rfc2136

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/libdns/libdns"
	"github.com/miekg/dns"
)

// Provider sends updates to one primary, signed with one TSIG key.
type Provider struct {
	// Server is the primary's address, host:port.
	Server string
	// KeyName is the TSIG key's name, as the primary knows it (e.g. "acme").
	KeyName string
	// KeyAlgorithm is hmac-sha256 (default) or hmac-sha512.
	KeyAlgorithm string
	// Secret is the key, base64.
	Secret string
	// Timeout bounds one exchange (default 10 s).
	Timeout time.Duration
}

var (
	_ libdns.RecordAppender = (*Provider)(nil)
	_ libdns.RecordDeleter  = (*Provider)(nil)
)

// AppendRecords adds recs to zone in one update; the primary applies all of them or none.
func (p *Provider) AppendRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	m := new(dns.Msg)
	m.SetUpdate(dns.Fqdn(zone))
	var out []libdns.Record
	for _, r := range recs {
		rr, err := toRR(r, zone)
		if err != nil {
			return nil, err
		}
		m.Insert([]dns.RR{rr})
		out = append(out, typed(r))
	}
	if err := p.send(ctx, m); err != nil {
		return nil, fmt.Errorf("append records to %s: %w", zone, err)
	}
	return out, nil
}

// DeleteRecords deletes recs from zone in one update: a record with a value deletes that record
// (whatever its TTL), one without a value its name's RRset of the type, one without a type every
// RRset of its name. RFC 2136 does not say what was there, so all of recs are returned.
func (p *Provider) DeleteRecords(ctx context.Context, zone string, recs []libdns.Record) ([]libdns.Record, error) {
	m := new(dns.Msg)
	m.SetUpdate(dns.Fqdn(zone))
	var out []libdns.Record
	for _, r := range recs {
		x := r.RR()
		name := dns.Fqdn(libdns.AbsoluteName(x.Name, zone))
		switch {
		case x.Type == "":
			m.RemoveName([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: name}}})
		case x.Data == "":
			t, ok := dns.StringToType[strings.ToUpper(x.Type)]
			if !ok {
				return nil, fmt.Errorf("delete records from %s: unknown type %q", zone, x.Type)
			}
			m.RemoveRRset([]dns.RR{&dns.ANY{Hdr: dns.RR_Header{Name: name, Rrtype: t}}})
		default:
			rr, err := toRR(r, zone)
			if err != nil {
				return nil, err
			}
			m.Remove([]dns.RR{rr})
		}
		out = append(out, typed(r))
	}
	if err := p.send(ctx, m); err != nil {
		return nil, fmt.Errorf("delete records from %s: %w", zone, err)
	}
	return out, nil
}

// toRR makes the wire record of r in zone: TXT from its text (split in strings of 255 bytes),
// the other types from their zone-file form.
func toRR(r libdns.Record, zone string) (dns.RR, error) {
	x := r.RR()
	name := dns.Fqdn(libdns.AbsoluteName(x.Name, zone))
	ttl := uint32(x.TTL / time.Second)
	if strings.EqualFold(x.Type, "TXT") {
		var parts []string
		for s := x.Data; ; s = s[255:] {
			if len(s) <= 255 {
				parts = append(parts, s)
				break
			}
			parts = append(parts, s[:255])
		}
		return &dns.TXT{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: ttl}, Txt: parts}, nil
	}
	rr, err := dns.NewRR(fmt.Sprintf("%s %d IN %s %s", name, ttl, x.Type, x.Data))
	if err != nil || rr == nil {
		return nil, fmt.Errorf("record %s %s %q: %v", x.Name, x.Type, x.Data, err)
	}
	return rr, nil
}

// typed returns r as the libdns type of its record type, as libdns asks providers to return.
func typed(r libdns.Record) libdns.Record {
	if t, err := r.RR().Parse(); err == nil {
		return t
	}
	return r
}

// send signs m and exchanges it over TCP; an answer other than NOERROR is an error naming the
// rcode (and the TSIG error, for NOTAUTH).
func (p *Provider) send(ctx context.Context, m *dns.Msg) error {
	if p.Server == "" || p.KeyName == "" || p.Secret == "" {
		return errors.New("rfc2136: set Server, KeyName and Secret")
	}
	alg := dns.HmacSHA256
	switch strings.ToLower(p.KeyAlgorithm) {
	case "", "hmac-sha256":
	case "hmac-sha512":
		alg = dns.HmacSHA512
	default:
		return fmt.Errorf("rfc2136: key algorithm %q: use hmac-sha256 or hmac-sha512", p.KeyAlgorithm)
	}
	key := dns.Fqdn(strings.ToLower(p.KeyName))
	timeout := p.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	m.SetTsig(key, alg, 300, time.Now().Unix())
	c := &dns.Client{Net: "tcp", Timeout: timeout, TsigSecret: map[string]string{key: p.Secret}}
	resp, _, err := c.ExchangeContext(ctx, m, p.Server)
	if err != nil {
		return fmt.Errorf("update %s at %s: %w", m.Question[0].Name, p.Server, err)
	}
	if resp.Rcode != dns.RcodeSuccess {
		why := dns.RcodeToString[resp.Rcode]
		if t := resp.IsTsig(); t != nil && t.Error != 0 {
			why += " (" + dns.RcodeToString[int(t.Error)] + ")"
		}
		return fmt.Errorf("update %s at %s: answered %s", m.Question[0].Name, p.Server, why)
	}
	return nil
}
