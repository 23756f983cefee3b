// Package keystore keeps the DNSSEC keys of the zones with a key policy, and their rollover
// state, in etcd for a fleet of DNS servers (the configuration's store:), so that every node
// signs with the same keys and a rollover happens once. A node advances a zone's state only
// under the zone's etcd lock (the others wait, then find nothing left to do); every node
// watches the store and reloads when another changed a state.
//
// Values are sealed with the fleet's key as the ACME storage's are: this is an area of
// internal/certstore's storage, laid out as
//
//	PREFIX/dnssec/data/<zone>/state.json            the zone's keyroll.State
//	PREFIX/dnssec/data/<zone>/K<zone>+013+<tag>.key  a key file (DNSKEY and private key)
//	PREFIX/dnssec/locks/<zone>/<lease>              the zone's lock, held while advancing
//
// A node that cannot reach etcd keeps signing with the last state and keys it read (a key's
// state at any moment follows from the timestamps it already has) and generates nothing. It
// keeps sealed copies of them in a directory of its own (Options.CacheDir, cache.go), so a node
// restarted while etcd is down signs with them too. A node with no copy (it never reached etcd,
// or its cache is gone) fails to load the zone, naming etcd and the fixes (noCopy): it neither
// generates keys of its own nor serves the zone unsigned.
package keystore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/dns/keyroll"
	"github.com/switchyard/switchyard/internal/certstore"
)

// Area is the store's key prefix under the URL's PREFIX.
const Area = "dnssec"

const stateName = "state.json"

// retryWait is how long after a failed read or lock the store is not asked again.
const retryWait = 5 * time.Second

// Options tune a Store; the zero value is what production runs.
type Options struct {
	// OpTimeout bounds each read, write and lock wait (default 10 s): past it the node goes on
	// with the keys it has.
	OpTimeout time.Duration
	// LockTTL is how long a node that died holding a zone's lock keeps it (default 10 s).
	LockTTL time.Duration
	// CacheDir keeps a sealed copy of every state and key file read or written (cache.go);
	// empty: none.
	CacheDir string
}

// Store is a keyroll.Store in etcd.
type Store struct {
	st      *certstore.Storage
	log     *slog.Logger
	timeout time.Duration
	cache   string // Options.CacheDir

	mu     sync.Mutex
	states map[string][]byte // the last state read or written per zone (JSON)
	keys   map[string][]byte // key files read or written, by zone/name: they never change
	down   bool              // the last read failed (logged once until one succeeds)
	// retryAt is when etcd is asked again after a read or lock that failed: until then both
	// fail at once, so a reload building many zones waits for one timeout, not one per zone.
	// lastErr is why that one failed.
	retryAt time.Time
	lastErr error
	// watching is set while Watch runs; stale are the zones whose state changed in etcd since
	// it was last read (marked by the watch), so their copy in states is not current.
	watching bool
	stale    map[string]bool
}

var _ keyroll.Store = (*Store)(nil)

// Open makes a client of the store at rawURL (etcd:// or etcds://, as control/store parses it)
// sealing values with the 32-byte key in keyFile. It does not wait for etcd.
func Open(rawURL, keyFile string, log *slog.Logger, o Options) (*Store, error) {
	if o.OpTimeout <= 0 {
		o.OpTimeout = 10 * time.Second
	}
	if o.LockTTL <= 0 {
		o.LockTTL = 10 * time.Second
	}
	st, err := certstore.Open(rawURL, keyFile, certstore.Options{Area: Area, KeyField: "store_key_file",
		OpTimeout: o.OpTimeout, LockTTL: o.LockTTL})
	if err != nil {
		return nil, fmt.Errorf("open dnssec key store: %w", err)
	}
	return &Store{st: st, log: log, timeout: o.OpTimeout, cache: o.CacheDir, states: map[string][]byte{}, keys: map[string][]byte{}, stale: map[string]bool{}}, nil
}

// Close ends the client.
func (s *Store) Close() error { return s.st.Close() }

func (s *Store) String() string { return s.st.String() }

// zoneKey is the storage key of name under zone ("example.org." keeps its dot: the root zone
// "." must have a name too).
func zoneKey(zone, name string) string { return strings.ToLower(zone) + "/" + name }

// Load reads zone's state from etcd; when etcd does not answer it returns the last state read
// (and logs once why), or the error when it has none.
func (s *Store) Load(zone string) (*keyroll.State, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	// Cleared before the read: a change the watch reports during it marks the zone again.
	s.mu.Lock()
	wasStale := s.stale[zone]
	delete(s.stale, zone)
	s.mu.Unlock()
	var b []byte
	err := s.waitingRetry()
	if err == nil {
		b, err = s.st.Load(ctx, zoneKey(zone, stateName))
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.noteUp()
		return &keyroll.State{Zone: zone}, nil
	case err != nil:
		s.mu.Lock()
		last, had := s.states[zone]
		first := !s.down
		s.down = true
		s.failedLocked(err)
		if wasStale { // still not read; a copy never read again is current until the watch says not
			s.stale[zone] = true
		}
		s.mu.Unlock()
		if !had {
			if last, had = s.cached(zoneKey(zone, stateName)); had {
				s.log.Warn("dns dnssec key store unreachable at start: signing with the keys this node cached in its last run", "zone", zone, "cache", s.cache, "err", err)
				s.mu.Lock()
				s.states[zone] = last
				s.mu.Unlock()
			}
		}
		if !had {
			if errors.Is(err, errRetryWait) { // the failure itself, not the wait for the next try
				s.mu.Lock()
				err = s.lastErr
				s.mu.Unlock()
			}
			return nil, fmt.Errorf("read key state of %s from %s: %w; %s", zone, s, err, s.noCopy())
		}
		if first {
			s.log.Warn("dns dnssec key store unreachable: signing with the last keys read, generating none until it answers", "store", s.String(), "err", err)
		}
		b = last
	default:
		s.noteUp()
		s.mu.Lock()
		changed := string(s.states[zone]) != string(b)
		s.states[zone] = b
		s.mu.Unlock()
		if changed {
			s.keep(zoneKey(zone, stateName), b)
		}
	}
	return s.parse(zone, b)
}

// Current is the state last read or written while the watch has reported no change of it
// since; otherwise it is Load.
func (s *Store) Current(zone string) (*keyroll.State, error) {
	s.mu.Lock()
	b, ok := s.states[zone]
	ok = ok && s.watching && !s.stale[zone]
	s.mu.Unlock()
	if !ok {
		return s.Load(zone)
	}
	return s.parse(zone, b)
}

// parse decodes zone's state.
func (s *Store) parse(zone string, b []byte) (*keyroll.State, error) {
	var st keyroll.State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read key state of %s in %s: %w; restore it from a backup", zone, s, err)
	}
	if st.Zone != zone {
		return nil, fmt.Errorf("read key state in %s: it is zone %s's, not %s's", s, st.Zone, zone)
	}
	return &st, nil
}

// noCopy says what a node that cannot read a state or key file from etcd, and has no copy of
// it, does about it. It never generates keys in its place: they would differ from the fleet's
// (other nodes would publish and sign with other DNSKEYs), and signing nothing would make the
// zone bogus wherever the parent has its DS; so the zone is not loaded (a start fails, a reload
// keeps the old zones), and the fixes are named.
func (s *Store) noCopy() string {
	fix := "start it once etcd answers"
	if s.cache != "" {
		fix += ", or copy " + s.cache + " from another node of the fleet (sealed with the same store_key_file)"
	}
	return "this node has no copy of the fleet's keys, in memory or in its cache, and generates none (they would differ from the fleet's): " + fix
}

// errRetryWait is the error of a read or lock not sent: etcd failed the last one moments ago.
var errRetryWait = errors.New("etcd did not answer")

// waitingRetry is an error while the store is not to be asked again yet.
func (s *Store) waitingRetry() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if wait := time.Until(s.retryAt); wait > 0 {
		return fmt.Errorf("%w (%w); asking again in %s", errRetryWait, s.lastErr, wait.Round(time.Second))
	}
	return nil
}

// failedLocked notes a failed read or lock, err (s.mu held).
func (s *Store) failedLocked(err error) {
	if !errors.Is(err, errRetryWait) {
		s.lastErr = err
	}
	s.retryAt = time.Now().Add(retryWait)
}

// noteUp logs that the store answers again after a failure.
func (s *Store) noteUp() {
	s.mu.Lock()
	was := s.down
	s.down = false
	s.mu.Unlock()
	if was {
		s.log.Info("dns dnssec key store answers again", "store", s.String())
	}
}

// Save writes st to etcd.
func (s *Store) Save(st *keyroll.State) error {
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("write key state: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.st.Store(ctx, zoneKey(st.Zone, stateName), b); err != nil {
		return err
	}
	s.mu.Lock()
	s.states[st.Zone] = b
	s.mu.Unlock()
	s.keep(zoneKey(st.Zone, stateName), b)
	return nil
}

// WriteKey stores a key file, sealed.
func (s *Store) WriteKey(zone, name string, b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	if err := s.st.Store(ctx, zoneKey(zone, name), b); err != nil {
		return err
	}
	s.mu.Lock()
	s.keys[zoneKey(zone, name)] = b
	s.mu.Unlock()
	s.keep(zoneKey(zone, name), b)
	return nil
}

// ReadKey reads a key file, from memory once read: key files never change.
func (s *Store) ReadKey(zone, name string) ([]byte, error) {
	k := zoneKey(zone, name)
	s.mu.Lock()
	b, ok := s.keys[k]
	s.mu.Unlock()
	if ok {
		return b, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	b, err := s.st.Load(ctx, k)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		if c, ok := s.cached(k); ok { // etcd unreachable: the copy of the last run
			b, err = c, nil
		}
	} else if err == nil {
		s.keep(k, b)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("read dnssec key %s of %s from %s: %w; %s", name, zone, s, err, s.noCopy())
	}
	s.mu.Lock()
	s.keys[k] = b
	s.mu.Unlock()
	return b, nil
}

// Lock takes zone's lock in etcd, waiting at most the store's OpTimeout for another node to
// release it.
func (s *Store) Lock(ctx context.Context, zone string) (func(), error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	name := strings.ToLower(zone)
	if err := s.waitingRetry(); err != nil {
		return nil, fmt.Errorf("lock dnssec %s: %w", name, err)
	}
	if err := s.st.Lock(ctx, name); err != nil {
		s.mu.Lock()
		s.failedLocked(err)
		s.mu.Unlock()
		return nil, err
	}
	return func() {
		if err := s.st.Unlock(context.Background(), name); err != nil {
			s.log.Warn("dns dnssec key store", "err", err)
		}
	}, nil
}

// Watch calls changed with the zone whose state another node (or this one) wrote, until ctx
// ends; "" when the watch started again and any zone may have changed.
func (s *Store) Watch(ctx context.Context, changed func(zone string)) {
	s.mu.Lock()
	s.watching = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.watching = false
		s.mu.Unlock()
	}()
	s.st.Watch(ctx, func(key string) {
		if key == "" {
			s.mu.Lock()
			for zone := range s.states {
				s.stale[zone] = true
			}
			s.mu.Unlock()
			changed("")
			return
		}
		if zone, name, ok := strings.Cut(key, "/"); ok && name == stateName {
			s.mu.Lock()
			s.stale[zone] = true
			s.mu.Unlock()
			changed(zone)
		}
	})
}
