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
	if p := cfg.Zones[0].DNSSEC.Policy; p.Algorithm != 13 || p.Scheme != SchemeCSK || p.PropagationDelay.D().Hours() != 1 {
		t.Errorf("defaults: %+v", p)
	}
	for _, c := range []struct{ dnssec, want string }{
		{"{key_dir: k, policy: {algorithm: 8}}", "8 (RSASHA256) is not implemented"},
		{"{key_dir: k, policy: {algorithm: 7}}", "use 13 (ECDSA P-256) or 15"},
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
