package testenv

import (
	"fmt"
	"net"
	"os/exec"
	"testing"

	"github.com/switchyard/switchyard/testenv/fwd"
	"github.com/switchyard/switchyard/testenv/lab"
	"github.com/switchyard/switchyard/testenv/topo"
)

// TestTwoBalancersShareFlowsAndFailOver: two balancers behind one ECMP route (the router hashes
// the 5-tuple, as a ToR does for Katran or Cilium's L4LB) share the VIP's connections. One
// balancer dies and the router withdraws it: its established connections arrive at the other
// balancer, which has never seen them, and they keep working, each on the backend it had,
// because both balancers build the same Maglev table from the same backends.
func TestTwoBalancersShareFlowsAndFailOver(t *testing.T) {
	l := testLabSpec(t, lab.Spec{Clients: 1, Balancers: 2, Backends: 3})
	withApps(t, l)
	lbs := l.Topo.ByRole(topo.Balancer)
	f1, err := l.StartForwarder(lbs[0], 4099)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			f1.Close()
		}
	})
	f2, err := l.StartForwarder(lbs[1], 4099)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f2.Close() })

	before := make([]uint64, 2)
	for i, n := range lbs {
		st, err := topo.LinkStats(n.NS, n.Iface)
		if err != nil {
			t.Fatal(err)
		}
		before[i] = st.RxPackets
	}
	const conns = 40
	addr := net.JoinHostPort(lab.WebVIP4.String(), "80")
	ka := make([]*keepAliveConn, conns)
	first := make([]string, conns)
	for i := range ka {
		c, err := dialKeepAlive(l.Client(1).NS, addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.c.Close() })
		ka[i] = c
		if first[i], err = c.do(fmt.Sprintf("/before/%d", i)); err != nil {
			t.Fatalf("connection %d, first request: %v", i, err)
		}
	}
	for i, n := range lbs {
		st, err := topo.LinkStats(n.NS, n.Iface)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.RxPackets - before[i]; got < 20 {
			t.Errorf("balancer %s received %d packets of %d connections, want its ECMP share", n.Name, got, conns)
		}
	}

	// lb1 fails: the router withdraws it (a more specific route through lb2 only), then its
	// program goes away.
	if out, err := exec.Command("ip", "-n", l.Topo.RouterNS, "route", "add", lab.WebVIP4.String()+"/32",
		"via", lbs[1].Addr4.String()).CombinedOutput(); err != nil {
		t.Fatalf("withdraw lb1: %v: %s", err, out)
	}
	if err := f1.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	missBefore := nonSynMisses(t, f2)
	for i, c := range ka {
		be, err := c.do(fmt.Sprintf("/after/%d", i))
		if err != nil {
			t.Errorf("connection %d broke when lb1 failed: %v", i, err)
			continue
		}
		if be != first[i] {
			t.Errorf("connection %d moved from %s to %s", i, first[i], be)
		}
	}
	// The connections lb1 carried reached lb2 as established flows it had no entry for.
	if moved := nonSynMisses(t, f2) - missBefore; moved == 0 {
		t.Errorf("lb2 saw no established flow it did not know: lb1's connections did not fail over to it")
	} else {
		t.Logf("%d packets of lb1's connections adopted by lb2 from its Maglev table", moved)
	}
	// New connections go through lb2 alone.
	for i := 0; i < 10; i++ {
		c, err := dialKeepAlive(l.Client(1).NS, addr)
		if err != nil {
			t.Fatalf("new connection %d after failover: %v", i, err)
		}
		_, err = c.do("/new")
		c.c.Close()
		if err != nil {
			t.Fatalf("new connection %d after failover: %v", i, err)
		}
	}
}

// nonSynMisses is how many packets of established flows the forwarder had no entry for.
func nonSynMisses(t *testing.T, f *fwd.Forwarder) uint64 {
	t.Helper()
	cs, err := f.Maps.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return cs["conntrack_miss_nonsyn"].Packets
}
