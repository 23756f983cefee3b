package xfr

import (
	"context"
	"sync"
	"time"

	mdns "github.com/miekg/dns"
)

// notifyTries bounds the NOTIFY attempts per secondary and change (RFC 1996 3.6: retry until
// answered, a few times); the waits between them double from notifyRetry.
const (
	notifyTries = 5
	notifyRetry = time.Second
)

// Notify tells the secondaries of each zone whose serial changed in the reload that built t that
// it changed (RFC 1996), in the background: each secondary then asks for the SOA and an IXFR.
// The goroutines count in wg and stop when ctx ends; current returns the set being served, so a
// retry stops once its zone has moved on. The caller must not be waiting on wg while it adds.
func (s *Server) Notify(ctx context.Context, wg *sync.WaitGroup, t *Set, current func() *Set) {
	for _, x := range t.changed {
		for _, target := range x.notify {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.notifyOne(ctx, t, current, x, target)
			}()
		}
	}
}

// notifyOne sends one zone's NOTIFY to target until it is answered or notifyTries run out.
func (s *Server) notifyOne(ctx context.Context, t *Set, current func() *Set, x *Zone, target string) {
	m := new(mdns.Msg)
	m.SetNotify(x.origin)
	m.Authoritative = true
	m.Answer = []mdns.RR{x.soa} // RFC 1996 3.7: the new SOA, a hint for the secondary
	c := &mdns.Client{Net: "udp", Timeout: 2 * time.Second}
	k, signed := t.keys[x.key]
	if signed {
		c.TsigSecret = map[string]string{k.name: k.secret}
	}
	wait := notifyRetry
	var err error
	for try := 1; try <= notifyTries; try++ {
		if cur := current().zones[x.origin]; cur == nil || cur.soa.Serial != x.soa.Serial {
			return // the zone moved on: the NOTIFY of the newer serial replaces this one
		}
		if signed {
			m.Extra = nil // the client's signing rewrites the TSIG: sign every try afresh
			m.SetTsig(k.name, k.algorithm, tsigFudge, time.Now().Unix())
		}
		var resp *mdns.Msg
		resp, _, err = c.ExchangeContext(ctx, m, target)
		if err == nil && resp.Rcode == mdns.RcodeSuccess {
			s.Notifies.WithLabelValues(x.origin, target, "ok").Inc()
			s.Log.Info("dns notify sent", "zone", x.origin, "serial", x.soa.Serial, "target", target, "tries", try)
			return
		}
		if err == nil {
			err = errRcode(resp.Rcode)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait *= 2
	}
	s.Notifies.WithLabelValues(x.origin, target, "error").Inc()
	s.Log.Warn("dns notify failed; the secondary catches up at its next SOA refresh", "zone", x.origin,
		"serial", x.soa.Serial, "target", target, "tries", notifyTries, "err", err)
}

// errRcode is a NOTIFY answered with an rcode other than NOERROR.
type errRcode int

func (e errRcode) Error() string { return "answered " + mdns.RcodeToString[int(e)] }
