package keyroll

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// Store keeps zones' key files and key states: a key directory (DirStore), or, for a fleet,
// etcd (package dns/keystore), where every node signs with the same keys.
type Store interface {
	// Load reads zone's state; a zone without one has an empty state.
	Load(zone string) (*State, error)
	// Current is Load from memory when the store knows its copy is current (etcd's, while
	// watched): the server's key loop reads every state each second.
	Current(zone string) (*State, error)
	// Save writes st, whole: a reader sees the old state or the new one.
	Save(st *State) error
	// WriteKey stores a new key file of zone under name (KeyState.File).
	WriteKey(zone, name string, b []byte) error
	// ReadKey reads the key file name of zone.
	ReadKey(zone, name string) ([]byte, error)
	// Lock keeps every other node from advancing zone's keys until unlock is called: two nodes
	// advancing one state at once would each generate a successor.
	Lock(ctx context.Context, zone string) (unlock func(), err error)
	// String names the store in messages.
	String() string
}

// DirStore is a key directory: one file per key and one state file per zone, used by one
// server (its Lock is a no-op).
type DirStore string

var _ Store = DirStore("")

// Load reads the zone's state file.
func (d DirStore) Load(zone string) (*State, error) { return Load(string(d), zone) }

// Current reads the zone's state file: a local file is as cheap as a copy in memory.
func (d DirStore) Current(zone string) (*State, error) { return Load(string(d), zone) }

// Save writes the zone's state file atomically.
func (d DirStore) Save(st *State) error { return st.Save(string(d)) }

// WriteKey writes a key file (mode 0600), creating the directory.
func (d DirStore) WriteKey(zone, name string, b []byte) error {
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return fmt.Errorf("create key_dir: %w", err)
	}
	return writeAtomic(filepath.Join(string(d), name), b)
}

// ReadKey reads a key file.
func (d DirStore) ReadKey(zone, name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(string(d), name))
	if err != nil {
		return nil, fmt.Errorf("read dnssec key: %w", err)
	}
	return b, nil
}

// Lock does nothing: a key directory belongs to one server.
func (d DirStore) Lock(context.Context, string) (func(), error) { return func() {}, nil }

func (d DirStore) String() string { return string(d) }
