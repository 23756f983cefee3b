package daemon

import (
	"net/netip"
	"testing"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/health"
)

func testConfig(t *testing.T, policy string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(`interface: eth0
all_backends_down: ` + policy + `
vips:
  - name: web
    address: 198.18.100.1
    port: 80
    backends:
      - {address: 198.18.3.1}
      - {address: 198.18.3.2, weight: 2}
      - {address: 198.18.3.3, drained: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	return c
}

func down(addrs ...string) func(health.Key) bool {
	m := map[netip.Addr]bool{}
	for _, a := range addrs {
		m[netip.MustParseAddr(a)] = true
	}
	return func(k health.Key) bool { return !m[k.Backend] }
}

func states(t *testing.T, c *config.Config, healthy func(health.Key) bool, expired func(health.Key) bool) map[string]backendState {
	t.Helper()
	want, st := Desired(c, healthy, expired)
	out := map[string]backendState{}
	for k, s := range st {
		out[k.Backend.String()] = s
	}
	// The reconcile input agrees with the states.
	for _, b := range want[0].Backends {
		if b.InRing != out[b.Addr.String()].inRing {
			t.Fatalf("backend %s: reconcile InRing %v, state %+v", b.Addr, b.InRing, out[b.Addr.String()])
		}
	}
	return out
}

func TestDesiredStates(t *testing.T) {
	c := testConfig(t, "keep")
	s := states(t, c, down(), nil)
	if s["198.18.3.1"].state != api.StateActive || !s["198.18.3.2"].inRing || s["198.18.3.3"].state != api.StateDraining || s["198.18.3.3"].inRing {
		t.Fatalf("all healthy: %+v", s)
	}
	s = states(t, c, down("198.18.3.1"), nil)
	if s["198.18.3.1"].state != api.StateUnhealthy || s["198.18.3.1"].inRing || !s["198.18.3.2"].inRing {
		t.Fatalf("one down: %+v", s)
	}
	s = states(t, c, down(), func(k health.Key) bool { return k.Backend == netip.MustParseAddr("198.18.3.3") })
	if s["198.18.3.3"].state != api.StateDrained {
		t.Fatalf("drain expired: %+v", s)
	}
}

// TestAllBackendsDownPolicy: with keep, a VIP whose every undrained backend fails keeps them all
// in the ring (drained ones stay out); with drop, the ring empties.
func TestAllBackendsDownPolicy(t *testing.T) {
	keep := states(t, testConfig(t, "keep"), down("198.18.3.1", "198.18.3.2"), nil)
	if keep["198.18.3.1"].state != api.StateAllDownKept || !keep["198.18.3.1"].inRing || !keep["198.18.3.2"].inRing || keep["198.18.3.3"].inRing {
		t.Fatalf("keep: %+v", keep)
	}
	drop := states(t, testConfig(t, "drop"), down("198.18.3.1", "198.18.3.2"), nil)
	for a, s := range drop {
		if s.inRing {
			t.Fatalf("drop: %s still in ring (%+v)", a, drop)
		}
	}
	if drop["198.18.3.1"].state != api.StateUnhealthy {
		t.Fatalf("drop: %+v", drop)
	}
	// A drained backend that is healthy does not count as "up" for the policy.
	keep = states(t, testConfig(t, "keep"), down("198.18.3.1", "198.18.3.2"), nil)
	if keep["198.18.3.3"].inRing {
		t.Fatal("drained backend put back by the keep policy")
	}
}
