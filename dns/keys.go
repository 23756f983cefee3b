package dns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/keyroll"
	"github.com/switchyard/switchyard/dns/keystore"
)

// keyTick is how often the key loop looks for a due key transition or DS check: it compares
// timestamps, so it is cheap, and a transition is a reload at most this late.
const keyTick = time.Second

// keyLoop is the state of the key policies' loop: when each zone's parents were last asked for
// its DS. mu serialises rounds (the loop's and a test's).
type keyLoop struct {
	mu      sync.Mutex
	dsAsked map[string]time.Time

	// store is the configuration's etcd key store, opened by the first build that needs it
	// (storeURL), under storeMu.
	storeMu  sync.Mutex
	store    *keystore.Store
	storeURL string
}

// keysOf is where zc's key policy keeps its keys: the configuration's etcd store (opened on
// first use, for the server's life), else the policy's key_dir.
func (s *Server) keysOf(cfg *config.Config, zc *config.Zone) (keyroll.Store, error) {
	if cfg.Store == "" {
		return keyroll.DirStore(keyroll.Dir(zc.DNSSEC, cfg.Dir)), nil
	}
	s.keys.storeMu.Lock()
	defer s.keys.storeMu.Unlock()
	switch {
	case s.keys.store == nil && s.serveCtx != nil:
		return nil, errors.New("field store: added by a reload; a store is taken at start: restart the server")
	case s.keys.store == nil:
		o := s.opt.KeyStore
		o.CacheDir = cmp.Or(o.CacheDir, cfg.KeyCacheDir())
		ks, err := keystore.Open(cfg.Store, cfg.StoreKeyPath(), s.log, o)
		if err != nil {
			return nil, fmt.Errorf("field store: %w", err)
		}
		s.keys.store, s.keys.storeURL = ks, cfg.Store
	case s.keys.storeURL != cfg.Store:
		return nil, fmt.Errorf("field store: changed from %s; a new store needs a restart", s.keys.storeURL)
	}
	return s.keys.store, nil
}

// closeKeyStore ends the etcd key store's client, if one was opened.
func (s *Server) closeKeyStore() {
	s.keys.storeMu.Lock()
	defer s.keys.storeMu.Unlock()
	if s.keys.store != nil {
		s.keys.store.Close()
		s.keys.store = nil
	}
}

// advanceKeys loads zc's key state, brings it up to now (generating keys and scheduling
// rollovers for the zone's largest TTL maxTTL) and saves it when that changed it, all under
// the zone's lock in the store. A store that cannot be locked (etcd unreachable) gives its last
// state, not advanced: the keys go on rolling by the timestamps they have, and none is made.
func (s *Server) advanceKeys(cfg *config.Config, zc *config.Zone, now time.Time, maxTTL uint32) (*keyroll.Roller, *keyroll.State, error) {
	kd, err := s.keysOf(cfg, zc)
	if err != nil {
		return nil, nil, err
	}
	r, err := keyroll.NewRoller(zc.Origin, kd, zc.DNSSEC, maxTTL)
	if err != nil {
		return nil, nil, err
	}
	r.Ran = s.runningPolicy(zc.Origin)
	unlock, lerr := kd.Lock(s.serveContext(), zc.Origin)
	if lerr != nil {
		s.log.Warn("dns dnssec keys not advanced: the key store cannot be locked; signing with the keys last read", "zone", zc.Origin, "err", lerr)
	} else {
		defer unlock()
	}
	st, err := kd.Load(zc.Origin)
	if err != nil || lerr != nil {
		return r, st, err
	}
	changed, err := r.Advance(st, now)
	if err != nil {
		return nil, nil, err
	}
	if changed {
		if err := kd.Save(st); err != nil {
			return nil, nil, err
		}
		s.log.Info("dns dnssec keys scheduled", "zone", zc.Origin, "keys", len(st.Keys), "store", kd.String())
	}
	return r, st, nil
}

// runningPolicy is the key policy of zone in the configuration the server runs (nil before its
// first build, or when it had none): keyroll.Roller.Ran.
func (s *Server) runningPolicy(zone string) *config.KeyPolicy {
	st := s.state.Load()
	if st == nil {
		return nil
	}
	for _, zc := range st.cfg.Zones {
		if zc.Origin == zone && zc.DNSSEC != nil {
			return zc.DNSSEC.Policy
		}
	}
	return nil
}

// serveContext is the context of the running server, or a background one before Start.
func (s *Server) serveContext() context.Context {
	if s.serveCtx != nil {
		return s.serveCtx
	}
	return context.Background()
}

// followKeys reloads whenever a policy zone's state changed in the etcd store (another node
// generated a key or saw a DS), so that every node signs with the new keys at once; the
// reload's own advance finds the state current and writes nothing. A watch that started again
// ("") reloads nothing: the store then reads every state afresh for the key loop, which
// reloads when one of them has a transition due.
func (s *Server) followKeys(ks *keystore.Store) {
	defer s.wg.Done()
	ks.Watch(s.serveCtx, func(zone string) {
		st := s.state.Load()
		for _, zc := range st.cfg.Zones {
			if zc.DNSSEC == nil || zc.DNSSEC.Policy == nil || zone != zc.Origin {
				continue
			}
			if err := s.reloadRunning(); err != nil {
				s.log.Warn("dns dnssec keys changed in the store: reload failed; the old keys sign", "zone", zone, "err", err)
			}
			return
		}
	})
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
		kd, err := s.keysOf(st.cfg, zc)
		if err != nil {
			return err
		}
		r, err := keyroll.NewRoller(zc.Origin, kd, zc.DNSSEC, z.MaxTTL())
		if err != nil {
			return err
		}
		ks, err := kd.Current(zc.Origin)
		if err != nil {
			return err
		}
		if next := r.NextEvent(ks, st.keysAt); !next.IsZero() && !now.Before(next) {
			due = true
		}
		if k := keyroll.AwaitingDS(ks, now); k != nil && zc.DNSSEC.DSCheck != nil && s.dsDue(zc, now) {
			seen, err := s.checkDS(ctx, zc, r, k)
			if err != nil {
				s.log.Warn("dns dnssec ds check", "zone", zc.Origin, "tag", k.Tag, "err", err)
			} else if seen {
				if err := s.markDSSeen(ctx, kd, zc.Origin, k.Tag, now); err != nil {
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
	return s.reloadRunning()
}

// reloadRunning reloads the configuration the server runs once it holds the reload lock, not
// one read before: a key transition, or another node's change, must not put back a
// configuration that an operator's reload replaced meanwhile (to the key policy that would be
// a change back, which reverses an algorithm rollover).
func (s *Server) reloadRunning() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(s.state.Load().base)
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
func (s *Server) checkDS(ctx context.Context, zc *config.Zone, r *keyroll.Roller, k *keyroll.KeyState) (bool, error) {
	key, err := r.Key(k)
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

// markDSSeen notes in the store, under the zone's lock, that the parent serves the DS of the
// key tag since now.
func (s *Server) markDSSeen(ctx context.Context, kd keyroll.Store, zone string, tag uint16, now time.Time) error {
	unlock, err := kd.Lock(ctx, zone)
	if err != nil {
		return err
	}
	defer unlock()
	st, err := kd.Load(zone)
	if err != nil {
		return err
	}
	for _, k := range st.Keys {
		if k.Tag == tag && k.DSSeen.IsZero() {
			k.DSSeen = now
			return kd.Save(st)
		}
	}
	return nil
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
