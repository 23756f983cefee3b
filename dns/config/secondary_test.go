package config

import (
	"strings"
	"testing"
)

// A secondary zone's block is checked: primaries as address:port (:53 added), a known key, and
// no data of its own; each error names the line and the fix.
func TestSecondaryValidation(t *testing.T) {
	const keys = "tsig_keys: [{name: k, secret: \"c3dpdGNoeWFyZC10cmFuc2Zlci10ZXN0LWtleS0zMmI=\"}]\n"
	c, err := Parse([]byte(keys + "zones:\n  - origin: a.test\n    secondary: {primaries: [192.0.2.1, \"192.0.2.2:5300\"], tsig: k}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Zones[0].Secondary.Primaries; got[0] != "192.0.2.1:53" || got[1] != "192.0.2.2:5300" {
		t.Errorf("primaries %v", got)
	}
	c.Dir = "/etc/sy"
	if p := c.SecondaryPath(&c.Zones[0]); p != "/etc/sy/a.test.zone" {
		t.Errorf("copy path %s", p)
	}
	for yml, want := range map[string]string{
		"zones:\n  - origin: a.test\n    file: z\n    secondary: {primaries: [192.0.2.1]}\n": "line 5: zone a.test.: field secondary: the zone's data comes from its primaries",
		"zones:\n  - origin: a.test\n    secondary: {primaries: []}\n":                       "field secondary.primaries: empty",
		"zones:\n  - origin: a.test\n    secondary: {primaries: [ns1.example]}\n":            `parse "ns1.example": write address:port`,
		"zones:\n  - origin: a.test\n    secondary: {primaries: [192.0.2.1], tsig: nokey}\n": `field secondary.tsig: "nokey" is not among tsig_keys`,
	} {
		_, err := Parse([]byte(keys + yml))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", yml, err, want)
		}
	}
}
