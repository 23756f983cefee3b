package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/testutil"
)

// TestStoreSeedGlobalGuard: `lb store seed` writes a file's VIPs and its global guard to a real
// etcd, once (a second seed leaves the guard there), and `lb store list` shows the guard.
func TestStoreSeedGlobalGuard(t *testing.T) {
	e := testutil.StartEtcd(t)
	url := "etcd://" + e.Endpoint + "/sy/seed"
	dir := t.TempDir()
	file := filepath.Join(dir, "lb.yaml")
	if err := os.WriteFile(file, []byte("interface: eth0\nguard: {deny: [203.0.113.0/24]}\nvips:\n  - {name: web, address: 198.18.100.1, port: 80, backends: [{address: 198.18.3.1}]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runL4CLI(t, "lb", "store", "seed", "--store", url, file)
	if err != nil || !strings.Contains(out, "1 of 1 VIPs written") || !strings.Contains(out, "global guard written to /sy/seed/guard") {
		t.Fatalf("seed: %v: %s", err, out)
	}
	out, err = runL4CLI(t, "lb", "store", "seed", "--store", url, file)
	if err != nil || !strings.Contains(out, "global guard not written: /sy/seed/guard holds one already") {
		t.Fatalf("seed again: %v: %s", err, out)
	}
	out, err = runL4CLI(t, "lb", "store", "list", "--store", url)
	if err != nil || !strings.Contains(out, "global guard: allow -; deny 203.0.113.0/24; per source -") {
		t.Fatalf("list: %v: %s", err, out)
	}
}
