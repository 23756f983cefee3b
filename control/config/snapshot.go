package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"fmt"
	"os"
	"path/filepath"

	"github.com/switchyard/switchyard/internal/yamlx"
)

// A snapshot is a configuration in a form that decodes ten times faster than its YAML (gob),
// kept beside the file, hidden (.NAME.snapshot), and valid only for the exact bytes of the file
// it was made from: it starts with the SHA-256 of those bytes. A daemon that restarts over an
// unchanged file (an adopt: an upgrade, a crash) reads the snapshot instead of decoding 2.6 MB of
// YAML at 4,096 VIPs; any edit of the file changes its digest and the YAML is read again, with
// its errors located by line and field as ever. The YAML stays the operator's format: the
// snapshot is a cache, never read when it does not match, and never needed.
const snapshotMagic = "switchyard-lb-snapshot-v1\n"

// snapshotPath is where the snapshot of the file at path is kept.
func snapshotPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".snapshot")
}

// LoadSnapshotted is Load, reading the file's snapshot instead of its YAML when the snapshot was
// made from the file's bytes, and writing one after a YAML read (best effort: a directory the
// daemon cannot write to only costs the speed).
func LoadSnapshotted(path string) (*Config, error) {
	b, err := yamlx.ReadFile(path) // bounded: yamlx.MaxFileBytes
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	sum := sha256.Sum256(b)
	if c := readSnapshot(path, sum); c != nil {
		return c, nil
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	_ = writeSnapshot(path, sum, c)
	return c, nil
}

// readSnapshot returns the configuration of the snapshot of path when it was made from bytes
// of digest sum and still validates, else nil.
func readSnapshot(path string, sum [32]byte) *Config {
	b, err := os.ReadFile(snapshotPath(path))
	head := len(snapshotMagic) + len(sum)
	if err != nil || len(b) < head || string(b[:len(snapshotMagic)]) != snapshotMagic || !bytes.Equal(b[len(snapshotMagic):head], sum[:]) {
		return nil
	}
	var c Config
	if err := gob.NewDecoder(bytes.NewReader(b[head:])).Decode(&c); err != nil {
		return nil
	}
	if c.Validate() != nil {
		return nil // a snapshot of another version's rules: the YAML says why, with its line
	}
	return &c
}

// writeSnapshot writes the snapshot of c, made from the bytes of digest sum of the file at path.
func writeSnapshot(path string, sum [32]byte, c *Config) error {
	var buf bytes.Buffer
	buf.WriteString(snapshotMagic)
	buf.Write(sum[:])
	if err := gob.NewEncoder(&buf).Encode(c); err != nil {
		return fmt.Errorf("encode config snapshot: %w", err)
	}
	return writeFile(snapshotPath(path), buf.Bytes())
}

// Snapshot writes the snapshot of the configuration this Saver last saved to path, so that the
// next start over that file reads it without decoding its YAML (the daemon calls it when it
// stops). It does nothing when nothing was saved.
func (s *Saver) Snapshot(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.saved == nil {
		return nil
	}
	return writeSnapshot(path, sha256.Sum256(s.buf.Bytes()), s.saved)
}
