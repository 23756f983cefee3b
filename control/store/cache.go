package store

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/switchyard/switchyard/internal/atomicfile"
)

// The snapshot cache: the last snapshot a node applied, kept in a local file beside its control
// socket (/run: it lives as long as the pinned maps, until reboot). A daemon that restarts
// while etcd is unreachable starts from it instead of waiting, and its watch resumes from the
// cached revision once etcd answers again.

type cacheFile struct {
	URL      string       `json:"url"`
	Revision int64        `json:"revision"`
	Entries  []cacheEntry `json:"entries"`
	// Guard is the global guard as the store holds it (YAML; "" none), GuardRevision its key's
	// mod revision.
	Guard         string `json:"guard,omitempty"`
	GuardRevision int64  `json:"guard_revision,omitempty"`
}

type cacheEntry struct {
	Name        string `json:"name"`
	ModRevision int64  `json:"mod_revision"`
	// Value is the VIP as the store holds it (YAML).
	Value string `json:"value"`
}

// SaveCache writes the valid entries of sn to path atomically.
func (s *Store) SaveCache(path string, sn Snapshot) error {
	c := cacheFile{URL: s.u.String(), Revision: sn.Revision, GuardRevision: sn.GuardRevision}
	if sn.Guard != nil {
		b, err := encodeYAML(sn.Guard)
		if err != nil {
			return fmt.Errorf("save store cache: %w", err)
		}
		c.Guard = string(b)
	}
	for _, v := range sn.VIPs() {
		b, err := Encode(v)
		if err != nil {
			return err
		}
		c.Entries = append(c.Entries, cacheEntry{Name: v.Name, ModRevision: sn.Entries[v.Name].ModRevision, Value: string(b)})
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("save store cache: %w", err)
	}
	if err := atomicfile.WriteBytes(path, 0o600, b); err != nil {
		return fmt.Errorf("save store cache: %w", err)
	}
	return nil
}

// LoadCache reads a snapshot saved by SaveCache for this store's URL; every value is decoded
// and checked again as a listing would.
func (s *Store) LoadCache(path string) (Snapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Snapshot{}, fmt.Errorf("read store cache: %w", err)
	}
	var c cacheFile
	if err := json.Unmarshal(b, &c); err != nil {
		return Snapshot{}, fmt.Errorf("read store cache %s: %w", path, err)
	}
	if c.URL != s.u.String() {
		return Snapshot{}, fmt.Errorf("read store cache %s: it is of %s, not %s", path, c.URL, s.u)
	}
	sn := Snapshot{Revision: c.Revision, Entries: map[string]Entry{}, GuardRevision: c.GuardRevision}
	if c.Guard != "" {
		if sn.Guard, err = s.decodeGuard([]byte(c.Guard)); err != nil {
			return Snapshot{}, fmt.Errorf("read store cache %s: %w", path, err)
		}
	}
	for _, e := range c.Entries {
		name, en := s.decode(s.VIPKey(e.Name), []byte(e.Value), e.ModRevision)
		if en.Err != nil {
			return Snapshot{}, fmt.Errorf("read store cache %s: %w", path, en.Err)
		}
		sn.Entries[name] = en
	}
	return sn, nil
}
