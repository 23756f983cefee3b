package daemon

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
)

func announceConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(`interface: eth0
all_backends_down: keep
vips:
  - {name: web, address: 198.18.100.1, port: 80, backends: [{address: 198.18.3.1}, {address: 198.18.3.2}]}
  - {name: echo, address: 198.18.100.1, port: 7, protocol: udp, backends: [{address: 198.18.3.1}]}
  - {name: web6, address: "fd00:5e:100::1", port: 80, backends: [{address: "fd00:5e:3::1", drained: true}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	return c
}

// TestAnnouncements: a VIP address is announced while the node is ready and one of its VIPs has
// an active backend; unhealthy-but-kept (all_backends_down: keep) and drained backends do not
// count; a node that is not ready announces nothing.
func TestAnnouncements(t *testing.T) {
	c := announceConfig(t)
	for _, tc := range []struct {
		name     string
		down     []string
		notReady string
		want     string
		reasons  []string
	}{
		{"all healthy", nil, "", "[198.18.100.1/32]", []string{"web=announced", "echo=announced", "web6=withdrawn"}},
		{"one down", []string{"198.18.3.1"}, "", "[198.18.100.1/32]", []string{"web=announced", "echo=withdrawn"}},
		{"all down, kept in the ring", []string{"198.18.3.1", "198.18.3.2"}, "", "[]", []string{"web=withdrawn", "echo=withdrawn"}},
		{"not ready", nil, "node not ready", "[]", []string{"web=withdrawn"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, st := Desired(c, down(tc.down...), nil)
			vips, prefixes := Announcements(c, st, tc.notReady)
			if got := fmt.Sprint(slices.SortedFunc(maps.Keys(prefixes), netip.Prefix.Compare)); got != tc.want {
				t.Errorf("%s: prefixes %s, want %s", tc.name, got, tc.want)
			}
			got := map[string]api.VIPAnnouncement{}
			for _, v := range vips {
				got[v.VIP] = v
			}
			for _, r := range tc.reasons {
				name, state, _ := strings.Cut(r, "=")
				if got[name].State != state {
					t.Errorf("%s: vip %s %+v, want %s", tc.name, name, got[name], state)
				}
			}
			if tc.name == "one down" && !strings.Contains(got["echo"].Reason, "stays announced for vip web") {
				t.Errorf("shared prefix reason: %q", got["echo"].Reason)
			}
		})
	}
	if v, p := Announcements(nil, nil, ""); v != nil || len(p) != 0 {
		t.Error("no reconcile yet must announce nothing")
	}
}

// TestAnnouncementsRoutePolicy: each prefix carries the node's policy, then its VIP's, then the
// VIP's overrides matching this node (communities add up, med and local_pref from the innermost
// level); announce_from keeps a VIP to the nodes it names by name or label, saying why elsewhere.
func TestAnnouncementsRoutePolicy(t *testing.T) {
	parse := func(node string) *config.Config {
		c, err := config.Parse([]byte(`interface: eth0
bgp:
  asn: 65001
  node: ` + node + `
  labels: [eu]
  communities: ["65001:100"]
  med: 5
  peers: [{address: 198.18.2.1, asn: 65000}]
vips:
  - name: web
    address: 198.18.100.1
    port: 80
    bgp:
      communities: ["65001:200"]
      large_communities: ["65001:1:2"]
      local_pref: 300
      overrides: [{node: lb2, med: 100, communities: ["65001:999"]}]
    backends: [{address: 198.18.3.1}]
  - name: api
    address: 198.18.100.2
    port: 80
    bgp: {communities: ["65001:300"], announce_from: [lb1, us]}
    backends: [{address: 198.18.3.1}]
`))
		if err != nil {
			t.Fatal(err)
		}
		c.ApplyDefaults()
		return c
	}
	web, api4 := netip.MustParsePrefix("198.18.100.1/32"), netip.MustParsePrefix("198.18.100.2/32")
	for _, tc := range []struct {
		node           string
		web, api       string
		apiWhy, webPol string
	}{
		{"lb1", "communities 65001:100 65001:200, large 65001:1:2, local_pref 300, med 5", "communities 65001:100 65001:300, med 5", "", "communities 65001:100 65001:200, large 65001:1:2, local_pref 300, med 5"},
		{"lb2", "communities 65001:100 65001:200 65001:999, large 65001:1:2, local_pref 300, med 100", "", "announce_from [lb1 us] does not include this node (lb2, labels eu)", "communities 65001:100 65001:200 65001:999, large 65001:1:2, local_pref 300, med 100"},
	} {
		c := parse(tc.node)
		_, st := Desired(c, down(), nil)
		vips, attrs := Announcements(c, st, "")
		if got := attrs[web].String(); got != tc.web {
			t.Errorf("%s: web %q, want %q", tc.node, got, tc.web)
		}
		a, ok := attrs[api4]
		if got := a.String(); ok != (tc.api != "") || got != tc.api {
			t.Errorf("%s: api announced %v %q, want %q", tc.node, ok, got, tc.api)
		}
		for _, v := range vips {
			if v.VIP == "api" && tc.apiWhy != "" && (v.State != api.AnnounceNo || v.Reason != tc.apiWhy) {
				t.Errorf("%s: api %+v, want withdrawn: %s", tc.node, v, tc.apiWhy)
			}
			if v.VIP == "web" && v.Policy != tc.webPol {
				t.Errorf("%s: web policy shown %q, want %q", tc.node, v.Policy, tc.webPol)
			}
		}
	}
}
