package main

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/control/config"
)

// TestParseQUICFlag: --quic reads as the YAML's quic block, and a bad value is refused naming
// the part at fault.
func TestParseQUICFlag(t *testing.T) {
	for in, want := range map[string]config.QUIC{
		"quic-lb":     {Enabled: true, Scheme: "quic-lb"},
		"quic-lb:1":   {Enabled: true, Scheme: "quic-lb", ServerIDLen: 1},
		"quic-lb:4:6": {Enabled: true, Scheme: "quic-lb", ServerIDLen: 4, ConfigID: 6},
		"katran":      {Enabled: true, Scheme: "katran"},
	} {
		if got, err := parseQUICFlag(in); err != nil || got != want {
			t.Errorf("--quic %s: %+v %v, want %+v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":              "the scheme is quic-lb or katran",
		"quicl":         "the scheme is quic-lb or katran",
		"katran:2":      "katran connection IDs carry their own ID length",
		"quic-lb:0":     "server ID length \"0\" is not 1..4",
		"quic-lb:x":     "server ID length \"x\"",
		"quic-lb:2:7":   "config id \"7\" is not 0..6",
		"quic-lb:2:1:1": "use quic-lb[:SERVER_ID_LEN[:CONFIG_ID]]",
	} {
		if _, err := parseQUICFlag(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--quic %q: %v, want an error with %q", in, err, want)
		}
	}
}
