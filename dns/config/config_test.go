package config

import (
	"strings"
	"testing"
)

func TestErrorsNameLineAndField(t *testing.T) {
	cases := map[string]struct{ yaml, want string }{
		"unknown field": {"zones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: weighted\n        sites:\n          - {name: x, addresses: [192.0.2.1], wieght: 2}\n",
			`line 7: unknown field "wieght"`},
		"bad policy": {"zones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: random\n        sites: [{name: x, addresses: [192.0.2.1]}]\n",
			`line 4: zone a.test. name "app.a.test.": field policy: "random" is unknown`},
		"bad address": {"zones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: failover\n        chain: [x]\n        sites: [{name: x, addresses: [300.1.1.1]}]\n",
			`field addresses: parse "300.1.1.1"`},
		"chain to unknown site": {"zones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: failover\n        chain: [y]\n        sites: [{name: x, addresses: [192.0.2.1]}]\n",
			`field chain: site "y" is not among this name's sites`},
		"geo without default": {"groups: {g1: [10.0.0.0/8]}\nzones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: geolocation\n        geo: {g1: [x]}\n        sites: [{name: x, addresses: [192.0.2.1]}]\n",
			"field geo: no default entry"},
		"unknown group": {"zones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: geolocation\n        geo: {g9: [x], default: [x]}\n        sites: [{name: x, addresses: [192.0.2.1]}]\n",
			`group "g9" is not defined`},
		"bad check target": {"zones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: failover\n        chain: [x]\n        sites: [{name: x, addresses: [192.0.2.1], check: {target: nowhere}}]\n",
			"field check.target"},
		"bad duration": {"zones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: failover\n        chain: [x]\n        sites: [{name: x, addresses: [192.0.2.1], check: {target: '127.0.0.1:1', interval: soon}}]\n",
			`parse duration "soon"`},
		"no zones":   {"listen: 127.0.0.1:53\n", "field zones: no zone configured"},
		"empty":      {"", "the file is empty"},
		"bad subnet": {"groups: {g1: [10.0.0.0/33]}\nzones: [{origin: a.test.}]\n", "field groups.g1"},
		"weights 0": {"zones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: weighted\n        sites: [{name: x, addresses: [192.0.2.1]}]\n",
			"every site has weight 0"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte("zones:\n  - origin: A.Test\n    names:\n      - name: app\n        policy: failover\n        chain: [x]\n        sites: [{name: x, addresses: [192.0.2.1], check: {target: '127.0.0.1:80'}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	z := c.Zones[0]
	n := z.Names[0]
	chk := n.Sites[0].Check
	if z.Origin != "a.test." || z.TTL != 300 || n.Name != "app.a.test." || n.TTL != 60 || n.AllDown != AllDownFailClosed ||
		chk.Type != "tcp" || chk.Rise != 2 || chk.Fall != 3 || c.MaxUDPSize != 1232 || c.Listen != "127.0.0.1:5353" {
		t.Fatalf("defaults not applied: %+v %+v %+v", z, n, chk)
	}
}

func TestDNSSECBlockErrors(t *testing.T) {
	for _, c := range []struct{ block, want string }{
		{"{}", "key_file: missing; create a key with `switchyard dns keygen --zone example.`"},
		{"{key_file: a, ksk_file: b}", "exclude each other"},
		{"{ksk_file: b}", "ksk_file and zsk_file go together"},
		{"{key_file: a, refresh: 10s}", "want refresh >= 1m"},
		{"{key_file: a, validity: 1h, refresh: 1h}", "validity >= 2 x refresh"},
		{"{key_file: a, algorithm: 8}", `unknown field "algorithm"`},
	} {
		_, err := Parse([]byte("zones:\n  - origin: example.\n    dnssec: " + c.block + "\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("dnssec %s: %v, want %q", c.block, err, c.want)
		}
	}
	cfg, err := Parse([]byte("zones:\n  - origin: example.\n    dnssec: {key_file: k}\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Zones[0].DNSSEC
	if d.Validity.D() != DefaultSigValidity || d.Refresh.D() != DefaultSigRefresh || d.DNSKEYTTL != DefaultDNSKEYTTL {
		t.Fatalf("defaults %+v", d)
	}
}
