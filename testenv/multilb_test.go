package testenv

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
)

// TestTwoBalancersShareFlowsAndFailOver: two balancer daemons announce the VIPs over BGP to the
// router (bird2), which installs one ECMP route through both and hashes the 5-tuple, as a ToR
// does for Katran or Cilium's L4LB; they share the VIP's connections. lb1 goes silent (SIGSTOP:
// no FIN, no keepalive, as a hung or cut-off node) and the router withdraws its route when the
// hold time expires; then lb1 is killed and its program detached. Its established connections
// arrive at lb2, which has never seen them, and keep working, each on the backend it had,
// because both balancers build the same Maglev table from the same backends.
func TestTwoBalancersShareFlowsAndFailOver(t *testing.T) {
	b := newBGPLab(t, 2)
	lb1, lb2 := b.lbs[0], b.lbs[1]
	for _, p := range b.l.VIPPrefixes() {
		via := b.routeVia(t, p)
		if len(via) != 2 {
			t.Fatalf("router route to %s via %v: want an ECMP route through both balancers, learned over BGP", p, via)
		}
	}
	// `lab status --json` shows bird's sessions and the ECMP routes.
	ls, err := lab.GetStatus(b.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if ls.BGP == nil || len(ls.BGP.Sessions) != 2 || !ls.BGP.Sessions[0].Established() || !ls.BGP.Sessions[1].Established() ||
		len(ls.BGP.Kernel) != 2 || len(ls.BGP.Kernel[0].Via) != 2 || len(ls.BGP.Routes) != 2 || len(ls.BGP.Routes[0].Paths) != 2 {
		t.Errorf("lab status bgp: %+v", ls.BGP)
	}
	before := make([]uint64, 2)
	for i, n := range b.lbs {
		st, err := topo.LinkStats(n.NS, n.Iface)
		if err != nil {
			t.Fatal(err)
		}
		before[i] = st.RxPackets
	}
	const conns = 40
	ka, first := openConns(t, b.l.Client(1), conns)
	for i, n := range b.lbs {
		st, err := topo.LinkStats(n.NS, n.Iface)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.RxPackets - before[i]; got < 20 {
			t.Errorf("balancer %s received %d packets of %d connections, want its ECMP share", n.Name, got, conns)
		}
	}

	// lb1 goes silent: only the hold time tells the router.
	pid := b.pid(t, lb1.Name)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	testutil.Eventually(t, lab.BGPHoldTime+5*time.Second, func() bool {
		for _, p := range b.l.VIPPrefixes() {
			via := b.routeVia(t, p)
			if len(via) != 1 || (via[0] != lb2.Addr4 && via[0] != lb2.Addr6) {
				return false
			}
		}
		return true
	}, "the router's VIP routes not through lb2 only")
	failover := time.Since(start)
	t.Logf("lb1 silent: the router withdrew its routes after %s (hold time %s)", failover.Round(10*time.Millisecond), lab.BGPHoldTime)
	if failover > lab.BGPHoldTime+2*time.Second {
		t.Errorf("failover took %s, more than the hold time %s (+2s)", failover, lab.BGPHoldTime)
	}
	// Now lb1 is gone for good: process and program.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := loader.Detach(lab.PinDir(lb1.NS, lb1.Iface)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return !xdpAttached(t, lb1) }, "lb1's program still attached")

	missBefore := b.nonSynMissesOf(t, lb2)
	if broken, moved := requestAll(t, ka, first, "after"); broken+moved > 0 {
		t.Errorf("lb1's failure broke %d and moved %d of %d connections", broken, moved, conns)
	}
	// The connections lb1 carried reached lb2 as established flows it had no entry for.
	if moved := b.nonSynMissesOf(t, lb2) - missBefore; moved == 0 {
		t.Errorf("lb2 saw no established flow it did not know: lb1's connections did not fail over to it")
	} else {
		t.Logf("%d packets of lb1's connections adopted by lb2 from its Maglev table", moved)
	}
	// New connections go through lb2 alone.
	for i := 0; i < 10; i++ {
		c, err := dialKeepAlive(b.l.Client(1).NS, netip.AddrPortFrom(lab.WebVIP4, 80).String())
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
