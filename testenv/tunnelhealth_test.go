package testenv

import (
	"context"
	"encoding/json"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/health"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
)

// fastHealth is the lab's HTTP check, quicker: a broken backend is down within a second or two.
func fastHealth() *config.HealthCheck {
	h := lab.DefaultHealth()
	h.Interval, h.Timeout = config.Duration(300*time.Millisecond), config.Duration(250*time.Millisecond)
	h.Rise, h.Fall = 2, 2
	return h
}

// checks reads `lb health --json`, by "vip backend".
func (d *daemonLab) checks(t *testing.T) map[string]api.HealthInfo {
	t.Helper()
	out, err := d.cli("lb", "health", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var hs []api.HealthInfo
	if err := json.Unmarshal(out, &hs); err != nil {
		t.Fatalf("decode lb health: %v: %s", err, out)
	}
	m := make(map[string]api.HealthInfo, len(hs))
	for _, h := range hs {
		m[h.VIP+" "+h.Backend] = h
	}
	return m
}

// waitChecks waits until every named check ("vip backend") has the wanted state and mode; a
// healthy one must have passed its last probe (a check starts healthy, so Healthy alone is no proof).
func (d *daemonLab) waitChecks(t *testing.T, mode string, want map[string]bool) {
	t.Helper()
	var last map[string]api.HealthInfo
	ok := func() bool {
		last = d.checks(t)
		for k, healthy := range want {
			h, found := last[k]
			if !found || !h.Checked || h.Healthy != healthy || h.Mode != mode || (healthy && h.Successes == 0) {
				return false
			}
		}
		return true
	}
	testutil.Eventually(t, 20*time.Second, ok, "checks did not reach %v in mode %s: %+v", want, mode, func() any { return last })
}

// directProbe is what a direct check from the balancer says of a backend: a TCP connect to its own
// address.
func directProbe(ns string, a netip.Addr) error {
	return namednetns.DoNamed(ns, func() error {
		return health.Probe(context.Background(), health.Spec{Type: "tcp", Addr: netip.AddrPortFrom(a, 80), Timeout: 2 * time.Second})
	})
}

// TestHealthThroughTunnel: with the default mode (tunnel) the daemon probes the VIP through the
// tunnel toward each backend. A healthy backend stays up and its decap program counts the probes;
// a backend without the VIP on lo, and one without the decap program, are marked down although a
// direct probe still reaches both; switched to health_mode: direct, the same two are up again.
func TestHealthThroughTunnel(t *testing.T) {
	d := newDaemonLabHealth(t, 3, fastHealth())
	l := d.Lab()
	bes := l.Topo.ByRole(topo.Backend)
	lb := l.Balancer()
	key := func(vip string, a netip.Addr) string { return vip + " " + a.String() }
	all := map[string]bool{}
	for _, b := range bes {
		all[key("web", b.Addr4)], all[key("web6", b.Addr6)] = true, true
	}
	d.waitChecks(t, health.ModeTunnel, all)

	// (1) The probes went through the tunnel: every backend decapsulated IPIP and IP6IP6 though no
	// client sent anything.
	for _, b := range bes {
		c, err := lab.DecapCounters(b)
		if err != nil {
			t.Fatal(err)
		}
		if c["decap_ipip"].Packets == 0 || c["decap_ip6ip6"].Packets == 0 {
			t.Errorf("%s decapsulated ipip %d, ip6ip6 %d packets: the probes did not come through the tunnel", b.Name, c["decap_ipip"].Packets, c["decap_ip6ip6"].Packets)
		}
	}
	if t.Failed() {
		out, _ := d.cli("lb", "health")
		t.Fatalf("lb health:\n%s", out)
	}

	// (2) Backend 2 loses the IPv4 VIP from lo: down for web, still up for web6.
	noVIP, noDecap := bes[1], bes[2]
	if out, err := exec.Command("ip", "-n", noVIP.NS, "addr", "del", lab.WebVIP4.String()+"/32", "dev", "lo").CombinedOutput(); err != nil {
		t.Fatalf("remove the VIP from lo of %s: %v: %s", noVIP.Name, err, out)
	}
	// (3) Backend 3 loses its decap program: down for both VIPs.
	if err := loader.Detach(lab.PinDir(noDecap.NS, noDecap.Iface)); err != nil {
		t.Fatal(err)
	}
	broken := map[string]bool{
		key("web", bes[0].Addr4): true, key("web6", bes[0].Addr6): true,
		key("web", noVIP.Addr4): false, key("web6", noVIP.Addr6): true,
		key("web", noDecap.Addr4): false, key("web6", noDecap.Addr6): false,
	}
	d.waitChecks(t, health.ModeTunnel, broken)
	hs := d.checks(t)
	if e := hs[key("web", noVIP.Addr4)]; !strings.Contains(e.Check, "via "+noVIP.Addr4.String()) || !strings.Contains(e.Check, lab.WebVIP4.String()) {
		t.Errorf("check %q: want the VIP it probes and the backend it goes through", e.Check)
	}
	// A direct probe would call both up: their hosts answer on their own addresses.
	for _, b := range []topo.Node{noVIP, noDecap} {
		if err := directProbe(lb.NS, b.Addr4); err != nil {
			t.Errorf("direct probe of %s: %v (the lab itself is broken)", b.Name, err)
		}
	}
	if row := d.backend(t, "web", noDecap.Addr4.String()); row.Health != "unhealthy" || row.HealthMode != health.ModeTunnel || row.InRing {
		t.Errorf("backend list row of %s: %+v, want unhealthy, tunnel, out of the ring", noDecap.Name, row)
	}

	// (4) Direct mode: the same broken backends pass (their hosts are up), and a failing
	// application still fails.
	p := lab.ConfigPath(d.Prefix, lb.NS)
	c, err := config.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	c.HealthMode = config.HealthDirect
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	if out, err := d.cli("lb", "config", "reload"); err != nil {
		t.Fatalf("reload: %v: %s", err, out)
	}
	d.admin(t, bes[0], "fail?on=1")
	direct := map[string]bool{}
	for k := range broken {
		direct[k] = true
	}
	direct[key("web", bes[0].Addr4)], direct[key("web6", bes[0].Addr6)] = false, false
	d.waitChecks(t, health.ModeDirect, direct)
}
