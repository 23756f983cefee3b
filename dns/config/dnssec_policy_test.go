package config

import (
	"strings"
	"testing"
)

// TestKeyPolicyValidation: a policy's defaults, and each bad policy refused naming the fix.
func TestKeyPolicyValidation(t *testing.T) {
	zone := func(dnssec string) string {
		return "zones:\n  - origin: example.org.\n    dnssec: " + dnssec + "\n    records: [\"@ SOA ns1 h 1 3600 600 604800 60\", \"@ NS ns1\"]\n"
	}
	cfg, err := Parse([]byte(zone("{key_dir: k, policy: {}}")))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := cfg.Zones[0].DNSSEC.Policy; p.Algorithm != 13 || p.Scheme != SchemeCSK || p.PropagationDelay.D().Hours() != 1 || p.ZoneMaxTTL != 0 {
		t.Errorf("defaults: %+v", p)
	}
	rsa, err := Parse([]byte(zone("{key_dir: k, policy: {algorithm: 8}}")))
	if err != nil {
		t.Fatal(err)
	}
	rsa.ApplyDefaults()
	if err := rsa.Validate(); err != nil || rsa.Zones[0].DNSSEC.Policy.KeySize != 2048 {
		t.Errorf("algorithm 8: %v, key_size %d, want 2048", err, rsa.Zones[0].DNSSEC.Policy.KeySize)
	}
	for _, c := range []struct{ dnssec, want string }{
		{"{key_dir: k, policy: {algorithm: 8, key_size: 1024}}", "1024 bits; use 2048 (the default) to 4096"},
		{"{key_dir: k, policy: {algorithm: 13, key_size: 2048}}", "drop key_size"},
		{"{key_dir: k, policy: {algorithm: 7}}", "use 13 (ECDSA P-256), 15 (Ed25519) or 8"},
		{"{key_dir: k, dnskey_ttl: 7200, policy: {zone_max_ttl: 3600}}", "dnskey_ttl 7200 is above policy.zone_max_ttl 3600"},
		{"{key_dir: k, policy: {scheme: split}}", "use csk or ksk_zsk"},
		{"{policy: {}}", "key_dir: missing"},
		{"{key_file: a.key, key_dir: k, policy: {}}", "drop key_file"},
		{"{key_file: a.key, key_dir: k}", "belong to a key policy"},
		{"{key_dir: k, policy: {}, ds_check: {}}", "ds_check.parents: empty"},
	} {
		cfg, err := Parse([]byte(zone(c.dnssec)))
		if err == nil {
			cfg.ApplyDefaults()
			err = cfg.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.dnssec, err, c.want)
		}
	}
}

// TestKeyStoreValidation: a fleet's store of policy keys is an etcd URL with its key file, and
// the policies then have no key_dir.
func TestKeyStoreValidation(t *testing.T) {
	const zone = "zones:\n  - origin: example.org.\n    dnssec: %s\n    records: [\"@ SOA ns1 h 1 3600 600 604800 60\", \"@ NS ns1\"]\n"
	for _, c := range []struct{ top, dnssec, want string }{
		{"store: etcd://127.0.0.1:2379/sy\nstore_key_file: k\n", "{policy: {}}", ""},
		{"store: etcds://127.0.0.1:2379/sy?ca=c\nstore_key_file: k\n", "{policy: {}}", ""},
		{"store: etcd://127.0.0.1:2379/sy\nstore_key_file: k\n", "{key_dir: k, policy: {}}", "drop key_dir (or store)"},
		{"store: etcd://127.0.0.1:2379/sy\n", "{policy: {}}", "store_key_file: missing"},
		{"store_key_file: k\n", "{key_dir: k, policy: {}}", "set without store"},
		{"store: /var/lib/keys\nstore_key_file: k\n", "{policy: {}}", "is not an etcd store"},
	} {
		cfg, err := Parse([]byte(c.top + strings.Replace(zone, "%s", c.dnssec, 1)))
		if err == nil {
			cfg.ApplyDefaults()
			err = cfg.Validate()
		}
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s%s: %v, want %q", c.top, c.dnssec, err, c.want)
		}
	}
}
