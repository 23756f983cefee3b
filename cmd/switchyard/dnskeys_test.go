package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sydns "github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// TestDnsKeys: `dns keys` lists the keys a policy zone's server made, with their states; before
// the server ran it says there are none and makes none.
func TestDnsKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dns.yaml")
	yml := `listen: 127.0.0.1:0
zones:
  - origin: example.org.
    dnssec: {key_dir: keys, policy: {scheme: ksk_zsk}}
    records: ["@ SOA ns1 hostmaster 1 3600 600 604800 60", "@ NS ns1", "ns1 A 127.0.0.1"]
`
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runDNSCLI(t, context.Background(), "keys", "--config", path)
	if err != nil || !strings.Contains(out, "no keys yet") {
		t.Fatalf("keys before the server ran: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "keys")); err == nil {
		t.Fatal("dns keys created the key directory; it must only read")
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sydns.NewServer(cfg, sydns.Options{}); err != nil {
		t.Fatal(err)
	}
	out, _, err = runDNSCLI(t, context.Background(), "keys", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"zone example.org.: policy ksk_zsk, algorithm 13", "ksk", "zsk", "active", "next transition"} {
		if !strings.Contains(out, want) {
			t.Errorf("dns keys lacks %q:\n%s", want, out)
		}
	}
}

// TestDnsKeysFleet: with store:, `dns keys` reads the keys from the fleet's etcd store, as the
// servers made them there.
func TestDnsKeysFleet(t *testing.T) {
	e := testutil.StartEtcd(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "store.key"), []byte(strings.Repeat("ab", 32)), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dns.yaml")
	yml := `listen: 127.0.0.1:0
store: etcd://` + e.Endpoint + `/switchyard/cli
store_key_file: store.key
zones:
  - origin: example.org.
    dnssec: {policy: {scheme: ksk_zsk}}
    records: ["@ SOA ns1 hostmaster 1 3600 600 604800 60", "@ NS ns1", "ns1 A 127.0.0.1"]
`
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runDNSCLI(t, context.Background(), "keys", "--config", path)
	if err != nil || !strings.Contains(out, "no keys yet in etcd://") {
		t.Fatalf("keys before a server ran: %v\n%s", err, out)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := sydns.NewServer(cfg, sydns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	out, _, err = runDNSCLI(t, context.Background(), "keys", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"keys in etcd://" + e.Endpoint + "/switchyard/cli/dnssec", "ksk", "zsk", "active"} {
		if !strings.Contains(out, want) {
			t.Errorf("dns keys lacks %q:\n%s", want, out)
		}
	}
}

// TestDnsKeysAlgorithmRollover: after the policy's algorithm changed, `dns keys` shows the
// algorithm rollover's stage and next step and each key's algorithm.
func TestDnsKeysAlgorithmRollover(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "dns.yaml")
	for _, alg := range []string{"13", "15"} {
		yml := `listen: 127.0.0.1:0
zones:
  - origin: example.org.
    dnssec: {key_dir: keys, policy: {scheme: ksk_zsk, algorithm: ` + alg + `}}
    records: ["@ SOA ns1 hostmaster 1 3600 600 604800 60", "@ NS ns1", "ns1 A 127.0.0.1"]
`
		if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sydns.NewServer(cfg, sydns.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err := runDNSCLI(t, context.Background(), "keys", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"alg 13 active", "alg 15 presigned", " sign 20",
		"algorithm rollover 13 -> 15, stage 2 of 6 (new RRSIGs): both algorithms sign every RRset; the algorithm 15 DNSKEYs are published at 20"} {
		if !strings.Contains(out, want) {
			t.Errorf("dns keys lacks %q:\n%s", want, out)
		}
	}
}
