package config

import (
	"strings"
	"testing"
)

// The tls block: an address:port and certificates (the shared tlsconf check); each error names
// the line and the fix.
func TestTLSValidation(t *testing.T) {
	const zones = "zones:\n  - origin: a.test\n    records: [\"@ NS ns1\"]\n"
	c, err := Parse([]byte(zones + "tls: {listen: \"0.0.0.0:853\", certificates: [{cert: c.pem, key: k.pem}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.Dir = "/etc/sy"
	if got := c.TLSConfig().Certificates[0].Cert; got != "/etc/sy/c.pem" {
		t.Errorf("cert path %s", got)
	}
	if c.TLS.Idle().Seconds() != 10 || c.TLS.Conns() != 512 {
		t.Errorf("defaults %v %v", c.TLS.Idle(), c.TLS.Conns())
	}
	for yml, want := range map[string]string{
		"tls: {listen: \":853\", certificates: [{cert: c, key: k}]}\n":                  `line 4: field tls.listen: parse ":853": write address:port`,
		"tls: {listen: \"0.0.0.0:853\"}\n":                                              "field tls.certificates: empty",
		"tls: {listen: \"0.0.0.0:853\", certificates: [{cert: c}]}\n":                   "field tls.certificates[0]: set both cert and key",
		"tls: {listen: \"0.0.0.0:853\", certificates: [{cert: c, key: k}], acme: {}}\n": `unknown field "acme"`,
	} {
		_, err := Parse([]byte(zones + yml))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", yml, err, want)
		}
	}
}
