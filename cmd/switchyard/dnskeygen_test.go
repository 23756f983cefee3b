package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/dns/dnssec"
)

// TestDnsKeygen: keygen writes a 0600 key file that the server loads, prints the DNSKEY and a
// DS whose SHA-256 digest matches the key, refuses to overwrite, and `dns check` accepts a
// zone signed with it.
func TestDnsKeygen(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "example.key")
	out, _, err := runDNSCLI(t, context.Background(), "keygen", "--zone", "example", "--out", key)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(key)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, err %v; want 0600", st.Mode(), err)
	}
	k, err := dnssec.LoadKey(key, "example.")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{k.DNSKEY.String(), k.DS().String(), "IN\tDS\t", " 13 2 ", "static-key 257 3 13"} {
		if !strings.Contains(out, want) {
			t.Errorf("keygen output lacks %q:\n%s", want, out)
		}
	}
	if _, _, err := runDNSCLI(t, context.Background(), "keygen", "--zone", "example.", "--out", key); err == nil ||
		!strings.Contains(err.Error(), "exists") {
		t.Errorf("second keygen to the same file: %v, want a refusal", err)
	}
	zsk := filepath.Join(dir, "zsk")
	if out, _, err := runDNSCLI(t, context.Background(), "keygen", "--zone", "example.", "--type", "zsk", "--out", zsk); err != nil ||
		strings.Contains(out, "IN\tDS\t") { // a DS record; "DS" alone occurs in base64 key material
		t.Errorf("zsk: err %v, output (no DS for a ZSK):\n%s", err, out)
	}
	rsa := filepath.Join(dir, "rsa")
	if out, _, err := runDNSCLI(t, context.Background(), "keygen", "--zone", "example.", "--algorithm", "8", "--out", rsa); err != nil ||
		!strings.Contains(out, "DNSKEY\t257 3 8 ") || !strings.Contains(out, "static-key 257 3 8") {
		t.Errorf("RSA key: err %v, output:\n%s", err, out)
	} else if k, err := dnssec.LoadKey(rsa, "example."); err != nil || k.DNSKEY.Algorithm != 8 {
		t.Errorf("RSA key file: %v", err)
	}
	if _, _, err := runDNSCLI(t, context.Background(), "keygen", "--zone", "example.", "--algorithm", "8", "--bits", "1024", "--out", rsa+"2"); err == nil ||
		!strings.Contains(err.Error(), "want 2048 to 4096") {
		t.Errorf("1024-bit RSA key: %v, want a refusal", err)
	}
	cfg := writeDNSConfig(t, "zones:\n  - origin: example.\n    dnssec: {ksk_file: "+key+", zsk_file: "+zsk+"}\n    records: ['www A 192.0.2.1']\n")
	if out, _, err := runDNSCLI(t, context.Background(), "check", "--config", cfg); err != nil || !strings.Contains(out, "configuration OK") || !strings.Contains(out, "dnssec example.: signed online") || !strings.Contains(out, "DS for the parent: "+k.DS().String()) {
		t.Errorf("check with the keys: %v\n%s", err, out)
	}
}
