package secondary

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/update"
	"github.com/switchyard/switchyard/dns/xfr"
	"github.com/switchyard/switchyard/dns/zone"
)

// Transfer kinds, as the metrics and `dns status` name them.
const (
	KindAXFR       = "AXFR"
	KindIXFR       = "IXFR"
	KindIXFRAsAXFR = "IXFR-as-AXFR" // asked IXFR, the primary sent the whole zone
)

// queryTimeout bounds a SOA query; transferTimeout the read of each message of a transfer.
const (
	queryTimeout    = 3 * time.Second
	transferTimeout = 10 * time.Second
)

// sign signs m with key (nil: unsigned) and returns the secrets a client checks answers with.
func sign(m *mdns.Msg, key *xfr.Key) map[string]string {
	if key == nil {
		return nil
	}
	secrets, alg := key.Client()
	m.SetTsig(key.Name(), alg, 300, time.Now().Unix())
	return secrets
}

// tlsFor is the client configuration of one primary: tc with its address as the name to check
// when tc names none; nil (no TLS) for nil.
func tlsFor(tc *tls.Config, primary string) *tls.Config {
	if tc == nil || tc.ServerName != "" {
		return tc
	}
	c := tc.Clone()
	if host, _, err := net.SplitHostPort(primary); err == nil {
		c.ServerName = host
	}
	return c
}

// errSOARefused is a primary refusing the SOA query: some serve a zone to transfers only (Knot
// refuses queries for the catalogs it generates), so the transfer itself is asked.
var errSOARefused = errors.New("answered REFUSED")

// soaSerial asks primary for the zone's SOA (over UDP, TCP when truncated; over TLS with tc)
// and returns its serial.
func soaSerial(ctx context.Context, primary, origin string, key *xfr.Key, tc *tls.Config) (uint32, error) {
	m := new(mdns.Msg)
	m.SetQuestion(origin, mdns.TypeSOA)
	m.RecursionDesired = false
	c := &mdns.Client{Net: "udp", Timeout: queryTimeout}
	if tc != nil {
		c.Net, c.TLSConfig = "tcp-tls", tc
	}
	c.TsigSecret = sign(m, key)
	resp, _, err := c.ExchangeContext(ctx, m, primary)
	if err == nil && resp.Truncated {
		c.Net = "tcp"
		c.TsigSecret = sign(m, key)
		resp, _, err = c.ExchangeContext(ctx, m, primary)
	}
	if err != nil {
		return 0, fmt.Errorf("ask %s for the SOA: %w", primary, err)
	}
	if resp.Rcode == mdns.RcodeRefused {
		return 0, fmt.Errorf("ask %s for the SOA: %w", primary, errSOARefused)
	}
	if resp.Rcode != mdns.RcodeSuccess || !resp.Authoritative {
		return 0, fmt.Errorf("ask %s for the SOA: answered %s (authoritative %t); check the primary serves %s",
			primary, mdns.RcodeToString[resp.Rcode], resp.Authoritative, origin)
	}
	for _, rr := range resp.Answer {
		if soa, ok := rr.(*mdns.SOA); ok && mdns.CanonicalName(soa.Hdr.Name) == origin {
			return soa.Serial, nil
		}
	}
	return 0, fmt.Errorf("ask %s for the SOA: the answer holds no SOA of %s", primary, origin)
}

// transferIn reads a whole transfer of origin from primary: AXFR, or IXFR from the serial of
// have when have is set; over TLS with tc.
func transferIn(ctx context.Context, primary, origin string, have *mdns.SOA, key *xfr.Key, tc *tls.Config) ([]mdns.RR, error) {
	m := new(mdns.Msg)
	if have != nil {
		m.SetIxfr(origin, have.Serial, have.Ns, have.Mbox)
	} else {
		m.SetAxfr(origin)
	}
	d := net0(ctx)
	t := &mdns.Transfer{DialTimeout: d, ReadTimeout: transferTimeout, WriteTimeout: d, TLS: tc}
	t.TsigSecret = sign(m, key)
	ch, err := t.In(m, primary)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", primary, err)
	}
	var rrs []mdns.RR
	for env := range ch {
		if env.Error != nil {
			err = env.Error
			continue // drain: In closes the channel once it stops
		}
		rrs = append(rrs, env.RR...)
	}
	if err != nil {
		return nil, fmt.Errorf("transfer from %s: %w", primary, err)
	}
	if len(rrs) == 0 {
		return nil, fmt.Errorf("transfer from %s: no records", primary)
	}
	if _, ok := rrs[0].(*mdns.SOA); !ok {
		return nil, fmt.Errorf("transfer from %s: the first record is not the SOA", primary)
	}
	return rrs, nil
}

// net0 is the dial and write timeout of a transfer: the time left in ctx, at most queryTimeout.
func net0(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return min(queryTimeout, time.Until(dl))
	}
	return queryTimeout
}

// fromAXFR builds the zone from a full transfer (SOA, body, SOA).
func fromAXFR(origin string, rrs []mdns.RR) (*zone.Zone, error) {
	last, ok := rrs[len(rrs)-1].(*mdns.SOA)
	if len(rrs) < 2 || !ok || last.Serial != rrs[0].(*mdns.SOA).Serial {
		return nil, errors.New("the full transfer does not end with the SOA it started with")
	}
	return zone.FromRecords(origin, rrs[:len(rrs)-1])
}

// ixfrSteps reads an incremental transfer's answer (RFC 1995 4): the new SOA, then per step the
// old SOA, the deletions, the new SOA and the additions, then the new SOA again. Each step is
// an update.Change whose Del and Add hold the SOAs, as zone.Apply takes them. full is set when
// the primary sent the whole zone instead (the second record is not a SOA).
func ixfrSteps(rrs []mdns.RR) (steps []update.Change, full bool, err error) {
	if len(rrs) == 1 {
		return nil, false, nil // current already
	}
	if _, ok := rrs[1].(*mdns.SOA); !ok {
		return nil, true, nil
	}
	end := rrs[0].(*mdns.SOA).Serial
	last, ok := rrs[len(rrs)-1].(*mdns.SOA)
	if !ok || last.Serial != end {
		return nil, false, errors.New("the incremental transfer does not end with the new SOA")
	}
	body := rrs[1 : len(rrs)-1]
	for len(body) > 0 {
		from := body[0].(*mdns.SOA) // every step starts at a SOA: checked by the loop below
		c := update.Change{From: from.Serial, Del: []mdns.RR{from}}
		i := 1
		for ; i < len(body); i++ {
			if _, ok := body[i].(*mdns.SOA); ok {
				break
			}
			c.Del = append(c.Del, body[i])
		}
		if i == len(body) {
			return nil, false, fmt.Errorf("step from serial %d has no new SOA", from.Serial)
		}
		to := body[i].(*mdns.SOA)
		c.To, c.Add = to.Serial, []mdns.RR{to}
		for i++; i < len(body); i++ {
			if _, ok := body[i].(*mdns.SOA); ok {
				break
			}
			c.Add = append(c.Add, body[i])
		}
		steps = append(steps, c)
		body = body[i:]
	}
	return steps, false, nil
}

// applySteps applies the steps of an incremental transfer to z, which must be at the first
// step's serial, each step starting where the last ended.
func applySteps(z *zone.Zone, steps []update.Change) (*zone.Zone, error) {
	for _, c := range steps {
		if c.From != z.SOA.Serial {
			return nil, fmt.Errorf("a step starts at serial %d but the copy is at %d", c.From, z.SOA.Serial)
		}
		var err error
		if z, err = z.Apply(c.Del, c.Add); err != nil {
			return nil, fmt.Errorf("apply the step from serial %d to %d: %w", c.From, c.To, err)
		}
	}
	return z, nil
}
