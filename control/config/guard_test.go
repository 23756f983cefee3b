package config

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

const guardSample = `interface: eth0
guard:
  allow: [198.51.100.0/24]
  deny: [203.0.113.0/24, "2001:db8:bad::/48"]
  per_source: {prefix_v4: 24, rate: 100}
vips:
  - name: web
    address: 198.18.100.1
    port: 80
    guard:
      deny: [192.0.2.0/25]
      per_vip: {rate: 1000, burst: 2000}
    backends:
      - address: 198.18.3.1
  - name: dns
    address: 198.18.100.1
    port: 53
    protocol: udp
    guard:
      per_source: {prefix_v6: 48, rate: 5, burst: 10}
    backends:
      - address: 198.18.3.1
`

// TestGuardConfig: the global guard applies to every VIP beside the VIP's own lists; a VIP's
// limits replace the global ones; defaults fill prefix lengths and bursts.
func TestGuardConfig(t *testing.T) {
	c, err := Parse([]byte(guardSample))
	if err != nil {
		t.Fatal(err)
	}
	web := c.GuardOf(&c.VIPs[0])
	if web == nil || !web.GlobalAllow || !web.GlobalDeny || len(web.Deny) != 1 || web.Deny[0] != netip.MustParsePrefix("192.0.2.0/25") {
		t.Fatalf("web's guard: %+v", web)
	}
	if s := web.PerSource; s == nil || s.PrefixV4 != 24 || s.PrefixV6 != DefaultGuardPrefixV6 || s.Rate != 100 || s.Burst != 100 {
		t.Fatalf("web's per_source (the global one, defaulted): %+v", web.PerSource)
	}
	if p := web.PerVIP; p == nil || p.Rate != 1000 || p.Burst != 2000 {
		t.Fatalf("web's per_vip: %+v", web.PerVIP)
	}
	dns := c.GuardOf(&c.VIPs[1])
	if s := dns.PerSource; s.PrefixV4 != DefaultGuardPrefixV4 || s.PrefixV6 != 48 || s.Rate != 5 || s.Burst != 10 || dns.PerVIP != nil {
		t.Fatalf("dns's guard: %+v / %+v", dns.PerSource, dns.PerVIP)
	}
	// Equal sees a guard change; Clone copies it.
	other := c.VIPs[0].Clone()
	other.Guard.Deny[0] = "192.0.2.128/25"
	if other.Equal(c.VIPs[0]) || c.VIPs[0].Guard.Deny[0] != "192.0.2.0/25" {
		t.Fatal("Clone shares the guard, or Equal ignores it")
	}
	none, err := Parse([]byte("interface: eth0\nvips:\n  - {address: 198.18.100.1, port: 80, backends: [{address: 198.18.3.1}]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g := none.GuardOf(&none.VIPs[0]); g != nil {
		t.Fatalf("no guard configured, yet %+v", g)
	}
}

// TestGuardConfigErrors: each mistake is refused at its line and field, naming the fix.
func TestGuardConfigErrors(t *testing.T) {
	cases := []struct{ from, to, field, msg string }{
		{"203.0.113.0/24, ", "203.0.113.1/24, ", "guard.deny[0]", "host bits set: give 203.0.113.0/24"},
		{"203.0.113.0/24, ", "203.0.113.7, ", "guard.deny[0]", "an address, not a prefix: write 203.0.113.7/32"},
		{"203.0.113.0/24, ", "203.0.113.0/33, ", "guard.deny[0]", "invalid prefix"},
		{"203.0.113.0/24, ", "\"::ffff:203.0.113.0/120\", ", "guard.deny[0]", "IPv4-mapped"},
		{"[203.0.113.0/24, ", "[203.0.113.0/24, 203.0.113.128/25, ", "guard.deny[1]", "overlaps 203.0.113.0/24"},
		{`"2001:db8:bad::/48"`, `"2001:db8::/32"`, "guard.deny[1]", ""}, // IPv6 prefixes overlap only IPv6 ones: fine
		{"{prefix_v4: 24, rate: 100}", "{prefix_v4: 24, rate: 0}", "guard.per_source.rate", "rate 0 is not a limit"},
		{"{prefix_v4: 24, rate: 100}", "{prefix_v4: 33, rate: 100}", "guard.per_source.prefix_v4", "use 1..32"},
		{"{prefix_v6: 48, rate: 5, burst: 10}", "{prefix_v6: 129, rate: 5}", "vips[1].guard.per_source.prefix_v6", "use 1..128"},
		{"{rate: 1000, burst: 2000}", "{rate: 0}", "vips[0].guard.per_vip.rate", "rate 0 is not a limit"},
		{"{rate: 1000, burst: 2000}", "{rate: 2000000000}", "vips[0].guard.per_vip.rate", "above 1000000000"},
		{"deny: [192.0.2.0/25]", "deny: [192.0.2.0/25, 192.0.2.0/25]", "vips[0].guard.deny[1]", "overlaps 192.0.2.0/25"},
		{"deny: [192.0.2.0/25]", "allow: [192.0.2.0/25]\n      deny: [192.0.2.0/24]", "", ""}, // an allow inside a deny is the point
		{"per_vip: {rate: 1000", "per_vip: {rte: 1000", "", "rte"},
	}
	for _, c := range cases {
		t.Run(c.to, func(t *testing.T) {
			in := strings.Replace(guardSample, c.from, c.to, 1)
			if in == guardSample {
				t.Fatalf("%q not in the sample", c.from)
			}
			_, err := Parse([]byte(in))
			if c.msg == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.msg) || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %q: want field %q, %q and a line", err, c.field, c.msg)
			}
		})
	}
}

// TestGuardTooManyRules: more prefixes than the tries hold is refused naming the fix.
func TestGuardTooManyRules(t *testing.T) {
	var b strings.Builder
	b.WriteString("interface: eth0\nguard:\n  deny:\n")
	for i := range 4097 {
		fmt.Fprintf(&b, "    - 10.%d.%d.0/24\n", i/256, i%256)
	}
	b.WriteString("vips: []\n")
	_, err := Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "the maps hold 4096 of each: merge prefixes") {
		t.Fatalf("4097 deny prefixes: %v", err)
	}
}
