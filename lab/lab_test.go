package lab

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/lab/topo"
)

func TestPlanVIPs(t *testing.T) {
	l, err := Plan(DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	if len(l.VIPs) != 6 {
		t.Fatalf("VIPs %+v", l.VIPs)
	}
	web := l.VIP("web")
	if web.Address != "198.18.100.1" || web.Port != 80 || len(web.Backends) != 3 || web.Backends[2].String() != "198.18.3.13" {
		t.Errorf("web = %+v", web)
	}
	if v := l.VIP("web6"); v.Backends[0].String() != "fd00:5e:3::11" {
		t.Errorf("web6 = %+v", v)
	}
	if v := l.VIP("l7"); len(v.Backends) != 2 || v.Backends[0].String() != "198.18.3.151" {
		t.Errorf("l7 = %+v", v)
	}
	if v := l.VIP("l7quic"); v.Address != L7VIP.String() || v.Port != 443 || v.Protocol != "udp" || !v.QUIC || len(v.Backends) != 2 {
		t.Errorf("l7quic = %+v", v)
	}
	if v := l.VIP("l7tls"); v.Port != 443 || v.Protocol != "tcp" || v.QUIC {
		t.Errorf("l7tls = %+v", v)
	}
	small, _ := Plan(Spec{Prefix: "sm", Clients: 1, Balancers: 1, Backends: 1, L7: 1})
	if len(small.VIPs) != 4 {
		t.Errorf("a lab without DNS and the edge (no ACME CA, so no TLS on L7) has %d VIPs, want 4", len(small.VIPs))
	}
	ids := map[uint32]bool{}
	for _, v := range l.VIPs {
		if ids[v.ID] {
			t.Errorf("duplicate VIP id %d", v.ID)
		}
		ids[v.ID] = true
	}
}

// TestDaemonConfigParses: the configuration the lab writes for `switchyard lb run` is accepted
// by the daemon's own parser, with the lab's addresses.
func TestDaemonConfigParses(t *testing.T) {
	l, err := Plan(DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	lb := l.Balancer()
	for _, h := range []*config.HealthCheck{DefaultHealth(), nil} {
		b, err := DaemonConfigFor(l, lb, SocketPath("sy", lb.NS), h).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		c, err := config.Parse(b)
		if err != nil {
			t.Fatalf("daemon rejects the lab's config: %v\n%s", err, b)
		}
		if c.Interface != "eth0" || len(c.VIPs) != 6 || c.NextHop != "198.18.2.1" || c.PinDir != PinDir("sy-lb1", "eth0") {
			t.Errorf("parsed %+v", c)
		}
		if (h != nil) != (c.VIPs[0].Health != nil) {
			t.Errorf("health %v -> parsed %+v", h, c.VIPs[0].Health)
		}
		q := c.VIPs[5]
		if q.Name != "l7quic" || !q.QUIC.Enabled || q.Backends[0].ServerID != 1 || q.Backends[1].ServerID != 2 {
			t.Errorf("the QUIC VIP: %+v", q)
		}
	}
}

func TestStopConfigs(t *testing.T) {
	l, err := Plan(DefaultSpec())
	if err != nil {
		t.Fatal(err)
	}
	dns, _ := l.Topo.Node("dns")
	for name, body := range map[string]string{
		"dns":  dnsConfig(l, dns, nil),
		"edge": edgeConfig(L7VIP, nil),
		"l7":   l7Config(l.Topo.ByRole(topo.Backend), nil, 1),
	} {
		var v map[string]any
		if err := yaml.Unmarshal([]byte(body), &v); err != nil {
			t.Errorf("%s config is not YAML: %v\n%s", name, err, body)
		}
	}
	if c := dnsConfig(l, dns, nil); !strings.Contains(c, `"static 900 A 198.18.4.80"`) || !strings.Contains(c, `name: www, ttl: 30, policy: failover`) || !strings.Contains(c, `"app A 198.18.100.10"`) {
		t.Errorf("dns config:\n%s", c)
	}
	if c := l7Config(l.Topo.ByRole(topo.Backend), nil, 1); !strings.Contains(c, "{address: 198.18.3.13:80}") {
		t.Errorf("l7 config:\n%s", c)
	}
}

func TestAppArgvBindsEveryVIP(t *testing.T) {
	l, _ := Plan(DefaultSpec())
	be, _ := l.Topo.Node("be1")
	got := strings.Join(appArgv("/bin/switchyard", be), " ")
	for _, want := range []string{"--name be1", "--udp 198.18.3.11:7", "--udp 198.18.100.1:7", "--udp [fd00:5e:100::1]:7"} {
		if !strings.Contains(got, want) {
			t.Errorf("argv %q lacks %q", got, want)
		}
	}
}
