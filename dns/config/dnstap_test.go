package config

import (
	"strings"
	"testing"
)

// The dnstap block: one reader (socket or tcp), relative sockets from the file's directory,
// both message kinds by default; each error names the line and the fix.
func TestDnstapValidation(t *testing.T) {
	const zones = "zones:\n  - origin: a.test\n    records: [\"@ NS ns1\"]\n"
	c, err := Parse([]byte(zones + "dnstap: {socket: tap.sock, responses: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n, a := c.Dnstap.Target("/etc/sy"); n != "unix" || a != "/etc/sy/tap.sock" {
		t.Errorf("target %s %s", n, a)
	}
	if !c.Dnstap.LogQueries() || c.Dnstap.LogResponses() {
		t.Errorf("queries %v responses %v", c.Dnstap.LogQueries(), c.Dnstap.LogResponses())
	}
	for yml, want := range map[string]string{
		"dnstap: {identity: x}\n":                                  "line 4: field dnstap: no reader; set socket",
		"dnstap: {socket: /a, tcp: \"127.0.0.1:6000\"}\n":          "field dnstap: both socket and tcp; keep one",
		"dnstap: {tcp: collector}\n":                               `field dnstap.tcp: parse "collector": write host:port`,
		"dnstap: {socket: /a, queries: false, responses: false}\n": "queries and responses are both false",
		"dnstap: {socket: /a, queue: -1}\n":                        "field dnstap.queue: -1 must be positive",
		"dnstap: {socket: /a, qeue: 5}\n":                          `unknown field "qeue"`,
	} {
		_, err := Parse([]byte(zones + yml))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", yml, err, want)
		}
	}
}
