package dns

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/secondary"
	"github.com/switchyard/switchyard/dns/xfr"
	"github.com/switchyard/switchyard/dns/zone"
)

// The zones served as a secondary (a secondary: block) come from package secondary: each has
// a secondary.Zone that keeps its copy fresh and hands new copies to installSecondary, which
// swaps them into the served state the way a dynamic update does. A zone without a copy yet,
// or whose copy expired, is in state.down: queries for it get SERVFAIL.

// runningSecondary is the refresh loop of one secondary zone.
type runningSecondary struct {
	z      *secondary.Zone
	cancel context.CancelFunc
}

// secondaryOptions returns the settings of the secondary zone zc of cfg (its TLS roots were
// read by checkXoT before).
func secondaryOptions(cfg *config.Config, zc *config.Zone) secondary.Options {
	tc, _ := xotClient(cfg, zc)
	return secondary.Options{Origin: zc.Origin, Primaries: zc.Secondary.Primaries,
		Key: xfr.ConfigKey(cfg, zc.Secondary.TSIG), Path: cfg.SecondaryPath(zc), TLS: tc}
}

// xotClient is the TLS client configuration of zc's transfers over TLS (RFC 9103: TLS 1.3,
// ALPN dot), nil without secondary.tls.
func xotClient(cfg *config.Config, zc *config.Zone) (*tls.Config, error) {
	st := zc.Secondary.TLS
	if st == nil {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"dot"}, ServerName: st.ServerName}
	if st.CAFile != "" {
		pem, err := os.ReadFile(cfg.Path(st.CAFile))
		if err != nil {
			return nil, fmt.Errorf("line %d: zone %s: field secondary.tls.ca_file: %w (give the PEM roots of the primaries' certificates)", zc.Secondary.Line, zc.Origin, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("line %d: zone %s: field secondary.tls.ca_file: no PEM certificate in %s", zc.Secondary.Line, zc.Origin, st.CAFile)
		}
	}
	return tc, nil
}

// checkXoT reads the TLS roots of every secondary zone, so a bad file fails the load or reload.
func checkXoT(cfg *config.Config) error {
	for i := range cfg.Zones {
		if zc := &cfg.Zones[i]; zc.Secondary != nil {
			if _, err := xotClient(cfg, zc); err != nil {
				return err
			}
		}
	}
	return nil
}

// buildSecondaries adds the copies of cfg's secondary zones to store: the zones of prev carry
// over (with their copies and loops), new ones read their saved copy. It returns the store, the
// zones by origin and the origins without a copy to serve.
func (s *Server) buildSecondaries(cfg *config.Config, store *zone.Store, prev *state) (*zone.Store, map[string]*secondary.Zone, map[string]bool) {
	secs := map[string]*secondary.Zone{}
	down := map[string]bool{}
	var copies []*zone.Zone
	prevCatalog := map[string]string{} // the catalog each member came from before
	if prev != nil {
		for _, z := range prev.cfg.Zones {
			if z.FromCatalog != "" {
				prevCatalog[z.Origin] = z.FromCatalog
			}
		}
	}
	for i := range cfg.Zones {
		zc := &cfg.Zones[i]
		if zc.Secondary == nil {
			continue
		}
		var sz *secondary.Zone
		if prev != nil {
			sz = prev.secondaries[zc.Origin]
			if was := prevCatalog[zc.Origin]; sz != nil && was != "" && zc.FromCatalog != "" && was != zc.FromCatalog {
				// A member moved to another catalog (its coo property): its state is reset
				// (RFC 9432 5.6), so the copy is taken anew from the new catalog's primaries,
				// whatever its serial.
				sz = nil
				if err := os.Remove(cfg.SecondaryPath(zc)); err != nil && !os.IsNotExist(err) {
					s.log.Warn("dns catalog member moved: saved copy not removed", "zone", zc.Origin, "err", err)
				}
				s.log.Info("dns catalog member moved: transferred anew", "zone", zc.Origin, "from", was, "to", zc.FromCatalog)
			}
		}
		if sz == nil {
			sz = s.newSecondary(cfg, zc)
		}
		secs[zc.Origin] = sz
		if cur := sz.Current(); cur != nil {
			copies = append(copies, cur)
		} else {
			down[zc.Origin] = true
		}
	}
	if len(copies) > 0 {
		store = store.With(copies...)
	}
	return store, secs, down
}

// newSecondary makes the secondary zone of zc, its hooks bound to it: a loop a reload replaced
// or removed changes nothing.
func (s *Server) newSecondary(cfg *config.Config, zc *config.Zone) *secondary.Zone {
	var sz *secondary.Zone
	origin := zc.Origin
	h := secondary.Hooks{Log: s.log, Transfers: s.ops.transfersIn}
	h.Install = func(z *zone.Zone) { s.changeSecondary(origin, sz, z) }
	h.Expire = func() { s.changeSecondary(origin, sz, nil) }
	sz = secondary.New(secondaryOptions(cfg, zc), h)
	return sz
}

// changeSecondary serves z as the copy of sz, the secondary zone origin, or, z nil, stops
// serving it (expired): a new state like a dynamic update's, with NOTIFY to its own
// secondaries.
func (s *Server) changeSecondary(origin string, sz *secondary.Zone, z *zone.Zone) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.state.Load()
	if st.secondaries[origin] != sz {
		return // removed or replaced by a reload while it was transferring
	}
	next := *st
	next.down = make(map[string]bool, len(st.down)+1)
	for o := range st.down {
		if o != origin {
			next.down[o] = true
		}
	}
	var replaced *zone.Zone // the copy z replaces, when one served
	if z != nil {
		next.store = st.store.With(z)
		if !st.down[origin] {
			replaced = st.store.Get(origin)
		}
	} else {
		next.store = st.store.Without(origin)
		next.down[origin] = true
	}
	if replaced != nil {
		s.swapState(st, &next, replaced)
	} else {
		s.swapState(st, &next)
	}
	s.followCatalogs(&next) // a catalog's new copy may add or remove member zones
}

// runSecondaries starts the loops of st's secondary zones that do not run yet, gives the
// running ones their settings and stops those st no longer has. The caller holds s.mu; the
// server has started.
func (s *Server) runSecondaries(st *state) {
	if s.serveCtx == nil || s.closed {
		return
	}
	for origin, r := range s.running {
		if st.secondaries[origin] != r.z {
			r.cancel()
			delete(s.running, origin)
		}
	}
	for i := range st.cfg.Zones {
		zc := &st.cfg.Zones[i]
		sz := st.secondaries[zc.Origin]
		if sz == nil {
			continue
		}
		sz.SetOptions(secondaryOptions(st.cfg, zc))
		if s.running[zc.Origin] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(s.serveCtx)
		s.running[zc.Origin] = &runningSecondary{z: sz, cancel: cancel}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			sz.Run(ctx)
		}()
	}
}

// downZone returns the secondary zone without a copy that qname falls in when it is closer than
// the served zone z (nil: none), or "".
func downZone(st *state, qname string, z *zone.Zone) string {
	best := ""
	for o := range st.down {
		if mdns.IsSubDomain(o, qname) && len(o) > len(best) && (z == nil || len(o) > len(z.Origin)) {
			best = o
		}
	}
	return best
}

// answerNotify answers a NOTIFY (RFC 1996): from a primary of a secondary zone (by address,
// and signed with the zone's key when it has one) it starts a refresh and is acknowledged;
// any other is REFUSED (NOTAUTH for a bad signature), as NSD answers.
func (s *Server) answerNotify(st *state, req *mdns.Msg, raw []byte, src netip.Addr) []byte {
	resp := new(mdns.Msg)
	resp.Id, resp.Response, resp.Opcode, resp.Question = req.Id, true, req.Opcode, req.Question
	var key *xfr.Key
	origin, why := "-", ""
	switch {
	case len(req.Question) != 1 || req.Question[0].Qtype != mdns.TypeSOA:
		resp.Rcode, why = mdns.RcodeFormatError, "want one SOA question naming the zone"
	default:
		origin = strings.ToLower(req.Question[0].Name)
		zc := zoneConfig(st.cfg, origin)
		if t := req.IsTsig(); t != nil {
			var refusal *mdns.Msg
			if key, refusal = st.xfr.VerifyTSIG(req, raw, t); refusal != nil {
				s.log.Warn("dns notify refused: bad TSIG", "zone", origin, "client", src.String(), "key", t.Hdr.Name)
				b, _ := refusal.Pack()
				return b
			}
		}
		switch {
		case zc == nil || zc.Secondary == nil || st.secondaries[origin] == nil:
			resp.Rcode, why = mdns.RcodeRefused, "not a secondary zone here"
		case !slices.Contains(zc.Secondary.PrimaryAddrs(), src.Unmap()):
			resp.Rcode, why = mdns.RcodeRefused, "not from a primary of the zone"
		case zc.Secondary.TSIG != "" && (key == nil || key.Name() != config.KeyName(zc.Secondary.TSIG)):
			resp.Rcode, why = mdns.RcodeRefused, "not signed with the zone's key "+zc.Secondary.TSIG
		default:
			resp.Authoritative = true
			st.secondaries[origin].Notify()
		}
	}
	if resp.Rcode == mdns.RcodeSuccess {
		s.log.Info("dns notify received", "zone", origin, "client", src.String())
	} else {
		s.log.Info("dns notify refused", "zone", origin, "client", src.String(), "reason", why)
	}
	var b []byte
	var err error
	if t := req.IsTsig(); t != nil && key != nil {
		b, err = key.Sign(resp, t.MAC)
	} else {
		b, err = resp.Pack()
	}
	if err != nil {
		return nil
	}
	return b
}
