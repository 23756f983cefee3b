package config

import (
	"fmt"
	"strings"
	"testing"
)

// TestRoutePolicyErrors: a bad community, large community, node reference or two VIPs on one
// address with different bgp sections are refused with the line, the field and the fix.
func TestRoutePolicyErrors(t *testing.T) {
	head := "interface: eth0\nbgp: {asn: 65001, peers: [{address: 198.18.2.1, asn: 65000}]%s}\nvips:\n"
	vip := "  - {name: %s, address: %s, port: %d, bgp: %s, backends: [{address: 198.18.3.1}]}\n"
	for _, tc := range []struct{ global, vips, want string }{
		{", communities: [\"65000:x\"]", "", `line 2: bgp.communities[0]: community "65000:x": use ASN:VALUE with both parts 0..65535`},
		{", large_communities: [\"1:2\"]", "", `bgp.large_communities[0]: large community "1:2": use GLOBAL:LOCAL1:LOCAL2`},
		{", labels: [\"a b\"]", "", `bgp.labels[0]: "a b" is not a label`},
		{"", sprintf(vip, "web", "198.18.100.1", 80, `{communities: ["65000:x"]}`), `line 4: vips[0].bgp.communities[0]: community "65000:x"`},
		{"", sprintf(vip, "web", "198.18.100.1", 80, `{large_communities: ["65001:1:4294967296"]}`), `vips[0].bgp.large_communities[0]`},
		{"", sprintf(vip, "web", "198.18.100.1", 80, `{announce_from: [lb1, lb1]}`), `vips[0].bgp.announce_from[1]: "lb1" listed twice`},
		{"", sprintf(vip, "web", "198.18.100.1", 80, `{overrides: [{med: 5}]}`), `vips[0].bgp.overrides[0].node: "" is not a node name or label`},
		{"", sprintf(vip, "web", "198.18.100.1", 80, `{overrides: [{node: lb1, communities: [x]}]}`), `vips[0].bgp.overrides[0].communities[0]`},
		{"", sprintf(vip, "web", "198.18.100.1", 80, `{med: 5}`) + sprintf(vip, "echo", "198.18.100.1", 7, `{med: 6}`),
			`vips[1].bgp: differs from vips[0] (web) on the same address 198.18.100.1`},
		{"", sprintf(vip, "web", "198.18.100.1", 80, `{mde: 5}`), `mde`},
	} {
		_, err := Parse([]byte(sprintf(head, tc.global) + tc.vips))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s%s: got %v, want %q", tc.global, tc.vips, err, tc.want)
		}
	}
	// The same policy on two VIPs of one address is fine.
	if _, err := Parse([]byte(sprintf(head, "") + sprintf(vip, "web", "198.18.100.1", 80, `{med: 5}`) + sprintf(vip, "echo", "198.18.100.1", 7, `{med: 5}`))); err != nil {
		t.Errorf("equal bgp on one address: %v", err)
	}
}

// TestCheckNodes: announce_from and overrides must name a known node or label.
func TestCheckNodes(t *testing.T) {
	c, err := Parse([]byte(`interface: eth0
vips:
  - {name: web, address: 198.18.100.1, port: 80, bgp: {announce_from: [lb1, eu], overrides: [{node: lb3, med: 9}]}, backends: [{address: 198.18.3.1}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	nodes := []Node{{Name: "lb1"}, {Name: "lb2", Labels: []string{"eu"}}}
	err = c.CheckNodes(nodes, nil)
	if err == nil || !strings.Contains(err.Error(), `vip web: bgp names node or label "lb3", which no node of the fleet has (known: lb1, lb2 [eu]): fix the name, or start that node first`) {
		t.Errorf("unknown node: %v", err)
	}
	if err := c.CheckNodes(append(nodes, Node{Name: "lb3"}), nil); err != nil {
		t.Errorf("every node known: %v", err)
	}
	if err := c.CheckNodes(nodes, c); err != nil {
		t.Errorf("a reference the previous configuration held is not checked again: %v", err)
	}
}

var sprintf = fmt.Sprintf
