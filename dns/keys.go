package dns

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnssec"
	"github.com/switchyard/switchyard/dns/keyroll"
)

// keyTick is how often the key loop looks for a due key transition or DS check: it compares
// timestamps, so it is cheap, and a transition is a reload at most this late.
const keyTick = time.Second

// keyLoop is the state of the key policies' loop: when each zone's parents were last asked for
// its DS. mu serialises rounds (the loop's and a test's).
type keyLoop struct {
	mu      sync.Mutex
	dsAsked map[string]time.Time
}

// advanceKeys loads zc's key state, brings it up to now (generating keys and scheduling
// rollovers for the zone's largest TTL maxTTL) and saves it when that changed it.
func (s *Server) advanceKeys(zc *config.Zone, dir string, now time.Time, maxTTL uint32) (*keyroll.Roller, *keyroll.State, error) {
	kd := keyroll.Dir(zc.DNSSEC, dir)
	r, err := keyroll.NewRoller(zc.Origin, kd, zc.DNSSEC, maxTTL)
	if err != nil {
		return nil, nil, err
	}
	st, err := keyroll.Load(kd, zc.Origin)
	if err != nil {
		return nil, nil, err
	}
	changed, err := r.Advance(st, now)
	if err != nil {
		return nil, nil, err
	}
	if changed {
		if err := st.Save(kd); err != nil {
			return nil, nil, err
		}
		s.log.Info("dns dnssec keys scheduled", "zone", zc.Origin, "keys", len(st.Keys))
	}
	return r, st, nil
}

// runKeys runs keyRound every keyTick until the server stops.
func (s *Server) runKeys() {
	defer s.wg.Done()
	t := time.NewTicker(keyTick)
	defer t.Stop()
	for {
		select {
		case <-s.serveCtx.Done():
			return
		case <-t.C:
			if err := s.keyRound(s.serveCtx); err != nil {
				s.log.Warn("dns dnssec key rollover: reload failed; retrying", "err", err)
			}
		}
	}
}

// keyRound reloads the configuration when a policy zone's key changed state since its signer
// was built, or a DS awaited at the parent was seen there: a key transition rebuilds the
// signers the way any reload does.
func (s *Server) keyRound(ctx context.Context) error {
	s.keys.mu.Lock()
	defer s.keys.mu.Unlock()
	st := s.state.Load()
	now := s.now()
	due := false
	for i := range st.cfg.Zones {
		zc := &st.cfg.Zones[i]
		if zc.DNSSEC == nil || zc.DNSSEC.Policy == nil {
			continue
		}
		z := st.store.Get(zc.Origin)
		if z == nil {
			continue
		}
		kd := keyroll.Dir(zc.DNSSEC, st.cfg.Dir)
		r, err := keyroll.NewRoller(zc.Origin, kd, zc.DNSSEC, z.MaxTTL())
		if err != nil {
			return err
		}
		ks, err := keyroll.Load(kd, zc.Origin)
		if err != nil {
			return err
		}
		if next := r.NextEvent(ks, st.keysAt); !next.IsZero() && !now.Before(next) {
			due = true
		}
		if k := keyroll.AwaitingDS(ks, now); k != nil && zc.DNSSEC.DSCheck != nil && s.dsDue(zc, now) {
			seen, err := s.checkDS(ctx, zc, kd, k)
			if err != nil {
				s.log.Warn("dns dnssec ds check", "zone", zc.Origin, "tag", k.Tag, "err", err)
			} else if seen {
				k.DSSeen = now
				if err := ks.Save(kd); err != nil {
					return err
				}
				s.log.Info("dns dnssec ds seen at every parent server", "zone", zc.Origin, "tag", k.Tag)
				due = true
			}
		}
	}
	if !due {
		return nil
	}
	return s.Reload(st.base)
}

// dsDue reports whether zc's parents are due to be asked again, and notes that they are.
func (s *Server) dsDue(zc *config.Zone, now time.Time) bool {
	if s.keys.dsAsked == nil {
		s.keys.dsAsked = map[string]time.Time{}
	}
	if last, ok := s.keys.dsAsked[zc.Origin]; ok && now.Sub(last) < zc.DNSSEC.DSCheck.Interval.D() {
		return false
	}
	s.keys.dsAsked[zc.Origin] = now
	return true
}

// checkDS asks every parent server of zc for the zone's DS RRset and reports whether each one
// serves the DS of k.
func (s *Server) checkDS(ctx context.Context, zc *config.Zone, kd string, k *keyroll.KeyState) (bool, error) {
	key, err := dnssec.LoadKey(filepath.Join(kd, k.File), zc.Origin)
	if err != nil {
		return false, err
	}
	want := key.DS()
	c := &mdns.Client{Net: "udp", Timeout: 3 * time.Second}
	for _, parent := range zc.DNSSEC.DSCheck.Parents {
		m := new(mdns.Msg)
		m.SetQuestion(zc.Origin, mdns.TypeDS)
		m.RecursionDesired = false
		r, _, err := c.ExchangeContext(ctx, m, parent)
		if err != nil {
			return false, fmt.Errorf("ask parent %s for the DS: %w", parent, err)
		}
		if !hasDS(r.Answer, want) {
			return false, nil
		}
	}
	return true, nil
}

func hasDS(rrs []mdns.RR, want *mdns.DS) bool {
	for _, rr := range rrs {
		if ds, ok := rr.(*mdns.DS); ok && ds.KeyTag == want.KeyTag && ds.Algorithm == want.Algorithm &&
			ds.DigestType == want.DigestType && strings.EqualFold(ds.Digest, want.Digest) {
			return true
		}
	}
	return false
}
