package config

import (
	"net/netip"
	"testing"
)

// TestParsedAddrs: validation records every address parsed and unmapped, the accessors return
// it, an address changed after validation is parsed again (never read stale), and Equal ignores
// the derived form.
func TestParsedAddrs(t *testing.T) {
	c, err := Parse([]byte("interface: eth0\nnext_hop: 10.9.9.9\nencap_source4: 10.8.0.0\n" +
		"vips:\n  - address: ::ffff:198.18.0.1\n    port: 80\n    backends:\n      - address: 10.0.0.1\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := &c.VIPs[0]
	if !v.addr.addr.IsValid() || !v.Backends[0].addr.addr.IsValid() || !c.nextHop.addr.IsValid() || !c.encap4.addr.IsValid() {
		t.Fatalf("validation left a parsed address empty: vip %v backend %v next hop %v encap4 %v", v.addr, v.Backends[0].addr, c.nextHop, c.encap4)
	}
	if got, want := v.Addr(), netip.MustParseAddr("198.18.0.1"); got != want {
		t.Errorf("VIP.Addr = %v, want the unmapped %v", got, want)
	}
	if got := c.NextHopAddr(); got != netip.MustParseAddr("10.9.9.9") {
		t.Errorf("NextHopAddr = %v", got)
	}
	if got := c.EncapSource6Addr(); got.IsValid() {
		t.Errorf("EncapSource6Addr of a left-out field = %v, want the zero Addr", got)
	}
	fresh := v.Clone()
	fresh.Backends[0].addr = parsedAddr{}
	if !v.Equal(fresh) {
		t.Error("Equal is false for VIPs that differ only in the derived parsed address")
	}
	v.Backends[0].Address = "10.0.0.2"
	if got := v.Backends[0].Addr(); got != netip.MustParseAddr("10.0.0.2") {
		t.Errorf("Backend.Addr after Address changed = %v, want 10.0.0.2 (the stale parse was read)", got)
	}
}
