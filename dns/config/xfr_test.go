package config

import (
	"slices"
	"strings"
	"testing"
)

const testSecret = "c3dpdGNoeWFyZC10cmFuc2Zlci10ZXN0LWtleS0zMmI="

func TestTransferErrorsNameLineAndField(t *testing.T) {
	key := "tsig_keys:\n  - {name: k1, secret: " + testSecret + "}\n"
	zone := func(transfer string) string {
		return key + "zones:\n  - origin: a.test.\n    transfer:\n" + transfer
	}
	cases := map[string]struct{ yaml, want string }{
		"unknown key": {zone("      allow: [127.0.0.1]\n      key: k2\n"),
			`line 6: zone a.test.: field transfer.key: "k2" is not among tsig_keys`},
		"open to all": {zone("      notify: ['127.0.0.1:53']\n"),
			"line 6: zone a.test.: field transfer.allow: empty and no key"},
		"bad prefix": {zone("      allow: [10.0.0.0/40]\n"),
			`line 6: zone a.test.: field transfer.allow: parse "10.0.0.0/40"`},
		"bad notify": {zone("      allow: [127.0.0.1]\n      notify: [secondary]\n"),
			`field transfer.notify: parse "secondary": write address:port`},
		"negative journal": {zone("      allow: [127.0.0.1]\n      journal: -1\n"),
			"field transfer.journal: -1 is negative"},
		"typo": {zone("      allow: [127.0.0.1]\n      notfy: ['127.0.0.1:53']\n"),
			`line 7: unknown field "notfy"`},
		"bad secret": {"tsig_keys:\n  - {name: k1, secret: 'not base64!'}\nzones: [{origin: a.test.}]\n",
			"line 2: key k1: field secret: want base64"},
		"short secret": {"tsig_keys:\n  - {name: k1, secret: c2hvcnQ=}\nzones: [{origin: a.test.}]\n",
			"field secret: want base64 of at least 16 bytes"},
		"other algorithm": {"tsig_keys:\n  - {name: k1, algorithm: hmac-md5, secret: " + testSecret + "}\nzones: [{origin: a.test.}]\n",
			`line 2: key k1: field algorithm: "hmac-md5" is not supported; use hmac-sha256 or hmac-sha512`},
		"key twice": {"tsig_keys:\n  - {name: k1, secret: " + testSecret + "}\n  - {name: K1., secret: " + testSecret + "}\nzones: [{origin: a.test.}]\n",
			"line 3: key K1.: field name: configured twice"},
		"bad fallback": {"zones:\n  - origin: a.test.\n    names:\n      - name: app\n        policy: failover\n        chain: [x]\n        transfer_fallback: [nowhere]\n        sites: [{name: x, addresses: [192.0.2.1]}]\n",
			`line 4: zone a.test. name "app.a.test.": field transfer_fallback: parse "nowhere"`},
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

func TestTransferDefaultsAndFallback(t *testing.T) {
	c, err := Parse([]byte(`tsig_keys: [{name: k1, secret: ` + testSecret + `}]
groups: {g1: [10.0.0.0/8]}
zones:
  - origin: a.test.
    transfer: {key: k1}
    names:
      - {name: geo, policy: geolocation, geo: {g1: [x], default: [y]}, sites: [{name: x, addresses: [192.0.2.1]}, {name: y, addresses: [192.0.2.2]}]}
      - {name: fo, policy: failover, chain: [y, x], sites: [{name: x, addresses: [192.0.2.1]}, {name: y, addresses: [192.0.2.2]}]}
      - {name: lat, policy: latency, latency: {default: {x: 9, y: 3}}, sites: [{name: x, addresses: [192.0.2.1]}, {name: y, addresses: [192.0.2.2]}]}
      - {name: lat0, policy: latency, latency: {default: {}}, sites: [{name: x, addresses: [192.0.2.1]}, {name: y, addresses: [192.0.2.2]}]}
      - {name: w, policy: weighted, sites: [{name: x, addresses: [192.0.2.1], weight: 1}, {name: y, addresses: [192.0.2.2], weight: 3}]}
      - {name: set, policy: weighted, transfer_fallback: [192.0.2.9, "2001:db8::9"], sites: [{name: x, addresses: [192.0.2.1], weight: 1}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	z := c.Zones[0]
	if z.Transfer.Journal != DefaultJournal || c.Key("K1.") == nil || c.TSIGKeys[0].Algorithm != TSIGAlgorithm {
		t.Fatalf("defaults: journal %d key %v algorithm %q", z.Transfer.Journal, c.Key("K1."), c.TSIGKeys[0].Algorithm)
	}
	want := map[string][]string{"geo.a.test.": {"192.0.2.2"}, "fo.a.test.": {"192.0.2.2"}, "lat.a.test.": {"192.0.2.2"},
		"lat0.a.test.": {"192.0.2.1"}, "w.a.test.": {"192.0.2.2"}, "set.a.test.": {"192.0.2.9", "2001:db8::9"}}
	for _, n := range z.Names {
		if got := n.FallbackAddresses(); !slices.Equal(got, want[n.Name]) {
			t.Errorf("%s: fallback %v, want %v", n.Name, got, want[n.Name])
		}
	}
}
