package daemon

import (
	"fmt"
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
			if got := fmt.Sprint(prefixes); got != tc.want {
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
	if v, p := Announcements(nil, nil, ""); v != nil || p != nil {
		t.Error("no reconcile yet must announce nothing")
	}
}
