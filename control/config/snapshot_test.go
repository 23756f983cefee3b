package config

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestSnapshot: a load writes the snapshot; the next load of the same bytes reads it and gives
// the configuration the YAML gives; an edit of the file (a bad one included) is read from the
// YAML, with the error's line; a snapshot that does not decode is ignored; the saver's snapshot
// of a changed configuration is what the saved file parses to.
func TestSnapshot(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lb.yaml")
	if err := os.WriteFile(path, []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	want, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSnapshotted(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(snapshotPath(path)); err != nil {
		t.Fatalf("no snapshot written: %v", err)
	}
	// Mark the snapshot so that a read of it shows (the same bytes of YAML, another name).
	c := *want
	c.Metrics = "127.0.0.1:9999"
	b, _ := os.ReadFile(path)
	if err := writeSnapshot(path, sha256Of(b), &c); err != nil {
		t.Fatal(err)
	}
	got, err := LoadSnapshotted(path)
	if err != nil || got.Metrics != "127.0.0.1:9999" {
		t.Fatalf("unchanged file: metrics %q (%v), want the snapshot read", got.Metrics, err)
	}
	// An edit: the YAML is read, and a bad edit reports its line.
	bad := strings.Replace(sample, "port: 80", "port: 80\n    protocol: sctp", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSnapshotted(path); err == nil || !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), "protocol") {
		t.Fatalf("bad edit: %v, want the YAML's located error", err)
	}
	if err := os.WriteFile(path, []byte(sample), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(snapshotPath(path), []byte(snapshotMagic+"garbage"), 0o600)
	if got, err := LoadSnapshotted(path); err != nil || got.Metrics == "127.0.0.1:9999" || !reflect.DeepEqual(exported(got), exported(want)) {
		t.Fatalf("broken snapshot: %+v %v, want the YAML's configuration", got, err)
	}
	// The saver's snapshot after a change: what the file it saved parses to.
	run := want.CloneForChange()
	run.ApplyDefaults()
	run.MutableVIP(0).Backends[0].Drained = true
	var s Saver
	if err := s.Save(run, path); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(path); err != nil {
		t.Fatal(err)
	}
	fromYAML, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	fromSnap, err := LoadSnapshotted(path)
	if err != nil {
		t.Fatal(err)
	}
	fromYAML.ApplyDefaults()
	fromSnap.ApplyDefaults()
	if !reflect.DeepEqual(exported(fromSnap), exported(fromYAML)) || !fromSnap.VIPs[0].Backends[0].Drained {
		t.Fatalf("saver snapshot\n%+v\nsaved file\n%+v", fromSnap, fromYAML)
	}
}

// exported is c through its snapshot encoding: the exported fields only.
func exported(c *Config) *Config {
	dir, _ := os.MkdirTemp("", "snap")
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "x.yaml")
	_ = writeSnapshot(p, [32]byte{}, c)
	return readSnapshot(p, [32]byte{})
}

func sha256Of(b []byte) [32]byte { return sha256.Sum256(b) }
