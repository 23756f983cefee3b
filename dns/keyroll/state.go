// Package keyroll makes and rolls the DNSSEC keys of a zone by its key policy: a ZSK rolls by
// pre-publication, a KSK or CSK by double signature (RFC 7583 section 3), all keys at once to a
// new algorithm when the policy's changes (RFC 6781 4.1.4, algroll.go; reversed early on,
// reverse.go), all keys at once to the other scheme when the policy's changes (schemeroll.go),
// with the intervals
// derived from the DNSKEY TTL, the zone's largest TTL, the parent's DS TTL and the propagation
// delay. Keys and their timestamps live in a Store: a key directory, the timestamps in one JSON
// file per zone written atomically, or a fleet's etcd (dns/keystore); a key's state at any moment follows from its timestamps, so a signer
// built at time t (dns/sign.go) publishes and signs with exactly the keys of t.
package keyroll

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The roles of a key.
const (
	RoleCSK = "csk"
	RoleKSK = "ksk"
	RoleZSK = "zsk"
)

// The states of a key, in order. Presigned and Withdrawn occur in algorithm rollovers only
// (RFC 6781 4.1.4): the new algorithm's RRSIGs come before its DNSKEYs, the old algorithm's
// RRSIGs go after its DNSKEYs.
const (
	Generated = "generated" // made, not yet in the DNSKEY RRset
	Presigned = "presigned" // signs, not yet in the DNSKEY RRset (a new algorithm's key)
	Published = "published" // in the DNSKEY RRset; a KSK or CSK also signs (double signature)
	Active    = "active"    // signs; a KSK or CSK is the one the parent's DS should name (CDS)
	Retired   = "retired"   // a successor took over; still published (and a KSK/CSK still signs)
	Withdrawn = "withdrawn" // out of the DNSKEY RRset, still signs (an old algorithm's key)
	Removed   = "removed"   // gone from the zone
)

// KeyState is one key of a zone: its file and timestamps. A zero timestamp is not scheduled yet.
type KeyState struct {
	Tag       uint16    `json:"tag"`
	Role      string    `json:"role"`
	Algorithm uint8     `json:"algorithm"`
	File      string    `json:"file"` // in the key directory
	Created   time.Time `json:"created"`
	// Sign is when an algorithm rollover's new key starts signing, before its Publish.
	Sign    time.Time `json:"sign,omitzero"`
	Publish time.Time `json:"publish,omitzero"`
	Active  time.Time `json:"active,omitzero"`
	Retire  time.Time `json:"retire,omitzero"`
	// Unpublish is when an algorithm rollover's old key leaves the DNSKEY RRset; it signs on
	// until its Remove.
	Unpublish time.Time `json:"unpublish,omitzero"`
	Remove    time.Time `json:"remove,omitzero"`
	// DSSeen is when the parent was seen serving this KSK's or CSK's DS (the first key's is its
	// creation: nothing is rolled away from it).
	DSSeen time.Time `json:"ds_seen,omitzero"`
	// Successor is the tag of the key that replaces this one (0: none yet); for a key whose
	// algorithm rollover was reversed, the key it was to replace.
	Successor uint16 `json:"successor,omitempty"`
	// Reverted is when the algorithm rollover to this key was reversed (reverse.go).
	Reverted time.Time `json:"reverted,omitzero"`
}

// SEP reports whether the key is a KSK or CSK (its DS goes to the parent).
func (k *KeyState) SEP() bool { return k.Role != RoleZSK }

// At is the key's state at t.
func (k *KeyState) At(t time.Time) string {
	reached := func(ts time.Time) bool { return !ts.IsZero() && !t.Before(ts) }
	switch {
	case reached(k.Remove):
		return Removed
	case reached(k.Unpublish):
		return Withdrawn
	case reached(k.Retire):
		return Retired
	case reached(k.Active):
		return Active
	case reached(k.Publish):
		return Published
	case reached(k.Sign):
		return Presigned
	}
	return Generated
}

// State is a zone's keys, oldest first.
type State struct {
	Zone string      `json:"zone"`
	Keys []*KeyState `json:"keys"`
}

// statePath is the zone's state file in dir.
func statePath(dir, zone string) string {
	return filepath.Join(dir, strings.TrimSuffix(zone, ".")+".keys.json")
}

// Load reads the zone's state from dir; a missing file is an empty state.
func Load(dir, zone string) (*State, error) {
	b, err := os.ReadFile(statePath(dir, zone))
	if errors.Is(err, os.ErrNotExist) {
		return &State{Zone: zone}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read key state: %w", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read key state %s: %w; restore it from a backup (the keys beside it are still valid)", statePath(dir, zone), err)
	}
	if st.Zone != zone {
		return nil, fmt.Errorf("read key state %s: it is zone %s's, not %s's; give each zone its own file", statePath(dir, zone), st.Zone, zone)
	}
	return &st, nil
}

// Save writes the state atomically: a temporary file renamed over the old one, so a crash leaves
// either the old or the new state.
func (st *State) Save(dir string) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("write key state: %w", err)
	}
	return writeAtomic(statePath(dir, st.Zone), append(b, '\n'))
}

func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return fmt.Errorf("write %s: %w; check that key_dir exists and is writable", path, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// key returns the key with tag, or nil.
func (st *State) key(tag uint16) *KeyState {
	for _, k := range st.Keys {
		if k.Tag == tag {
			return k
		}
	}
	return nil
}
