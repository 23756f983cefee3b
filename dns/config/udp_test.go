package config

import (
	"strings"
	"testing"
)

func TestUDPXDP(t *testing.T) {
	base := "zones:\n  - origin: example.com.\n    records: [\"www A 192.0.2.1\"]\n"
	for _, mode := range []string{"", "off", "generic", "native", "auto"} {
		y := base
		if mode != "" {
			y = "udp: {xdp: " + mode + "}\n" + base
		}
		c, err := Parse([]byte(y))
		if err != nil {
			t.Fatalf("udp.xdp %q: %v", mode, err)
		}
		if c.UDP.XDPEnabled() != (mode != "" && mode != "off") {
			t.Fatalf("udp.xdp %q: enabled = %v", mode, c.UDP.XDPEnabled())
		}
	}
	if _, err := Parse([]byte("udp: {xdp: fast}\n" + base)); err == nil || !strings.Contains(err.Error(), "udp.xdp") || !strings.Contains(err.Error(), "generic") {
		t.Fatalf("udp.xdp: fast: %v; want an error naming the field and the modes", err)
	}
	if _, err := Parse([]byte("udp: {xpd: generic}\n" + base)); err == nil || !strings.Contains(err.Error(), "xpd") {
		t.Fatalf("udp.xpd (typo): %v; want an unknown-field error", err)
	}
}
