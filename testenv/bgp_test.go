package testenv

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/bird"
	"github.com/switchyard/switchyard/lab/topo"
)

// bgpLab is a lab whose router (bird2) learns the VIP routes from the balancer daemons over
// BGP, with `switchyard lab app` processes on the backends.
type bgpLab struct {
	*lab.State
	l   *lab.Lab
	bin string
	lbs []topo.Node
}

func newBGPLab(t *testing.T, balancers int) *bgpLab { return newBGPLabStore(t, balancers, 0) }

// newBGPLabStore is newBGPLab with the VIPs in an etcd store of storeMembers (0: in files).
func newBGPLabStore(t *testing.T, balancers, storeMembers int) *bgpLab {
	t.Helper()
	testutil.RequireLab(t)
	if err := bird.Available(); err != nil {
		t.Skip(err)
	}
	bin := switchyardBin(t)
	s := lab.Spec{Prefix: uniquePrefix(), Clients: 1, Balancers: balancers, Backends: 3, BGP: true}
	t.Cleanup(func() {
		if t.Failed() {
			for _, f := range []string{"bird.log", "lb1.log", "lb2.log"} {
				b, _ := os.ReadFile(filepath.Join(lab.StateDir(s.Prefix), f))
				t.Logf("%s:\n%s", f, b)
			}
		}
		if err := lab.Destroy(s.Prefix); err != nil {
			t.Errorf("destroy lab: %v", err)
		}
	})
	st, err := lab.Up(lab.UpOptions{Spec: s, Exe: bin, Balancer: lab.ModeDaemon, StoreMembers: storeMembers})
	if err != nil {
		t.Fatal(err)
	}
	b := &bgpLab{State: st, l: st.Lab(), bin: bin, lbs: st.Lab().Topo.ByRole(topo.Balancer)}
	return b
}

// pid is the pid of a process the lab started.
func (b *bgpLab) pid(t *testing.T, name string) int {
	t.Helper()
	for _, p := range b.Procs {
		if p.Name == name {
			return p.PID
		}
	}
	t.Fatalf("no process %s in the lab", name)
	return 0
}

func (b *bgpLab) call(t *testing.T, n topo.Node, op string, req, resp any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return api.NewClient(b.Sockets[n.NS]).Call(ctx, op, req, resp)
}

// nonSynMissesOf is how many packets of established flows a balancer daemon had no entry for.
func (b *bgpLab) nonSynMissesOf(t *testing.T, n topo.Node) uint64 {
	t.Helper()
	var st api.Stats
	if err := b.call(t, n, api.OpStats, api.Empty{}, &st); err != nil {
		t.Fatal(err)
	}
	return st.Counters["conntrack_miss_nonsyn"].Packets
}

// routeVia is the router's next hops for a VIP prefix.
func (b *bgpLab) routeVia(t *testing.T, p netip.Prefix) []netip.Addr {
	t.Helper()
	via, err := topo.RouteVia(b.Topo.RouterNS, p)
	if err != nil {
		t.Fatal(err)
	}
	return via
}

// xdpAttached says whether a balancer's interface runs an XDP program.
func xdpAttached(t *testing.T, n topo.Node) bool {
	t.Helper()
	ifs, err := topo.Interfaces(n.NS)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ifs {
		if f.Name == n.Iface {
			return f.XDP != 0
		}
	}
	return false
}

// openConns opens n keep-alive connections to the web VIP and does a first request on each.
func openConns(t *testing.T, client topo.Node, n int) ([]*keepAliveConn, []string) {
	t.Helper()
	addr := net.JoinHostPort(lab.WebVIP4.String(), "80")
	ka := make([]*keepAliveConn, n)
	first := make([]string, n)
	for i := range ka {
		c, err := dialKeepAlive(client.NS, addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.c.Close() })
		ka[i] = c
		if first[i], err = c.do(fmt.Sprintf("/before/%d", i)); err != nil {
			t.Fatalf("connection %d, first request: %v", i, err)
		}
	}
	return ka, first
}

// requestAll does one request on every connection and counts the broken ones and the ones
// that moved to another backend.
func requestAll(t *testing.T, ka []*keepAliveConn, first []string, tag string) (broken, moved int) {
	t.Helper()
	for i, c := range ka {
		be, err := c.do(fmt.Sprintf("/%s/%d", tag, i))
		switch {
		case err != nil:
			broken++
			t.Errorf("%s: connection %d broke: %v", tag, i, err)
		case be != first[i]:
			moved++
			t.Errorf("%s: connection %d moved from %s to %s", tag, i, first[i], be)
		}
	}
	return broken, moved
}

var webPrefix4 = netip.PrefixFrom(lab.WebVIP4, 32)

// TestBGPAnnouncesOnlyWithAHealthyBackend: the daemon's VIP routes reach the router's kernel
// table over BGP while a backend is healthy, are withdrawn when every backend fails its checks
// (although all_backends_down: keep keeps forwarding), come back with the backends, and are
// withdrawn when the daemon stops (SIGTERM drains: withdraw, grace, detach).
func TestBGPAnnouncesOnlyWithAHealthyBackend(t *testing.T) {
	b := newBGPLab(t, 1)
	lb := b.lbs[0]
	if via := b.routeVia(t, webPrefix4); len(via) != 1 || via[0] != lb.Addr4 {
		t.Fatalf("router route to %s via %v, want %s (learned over BGP)", webPrefix4, via, lb.Addr4)
	}
	var st api.Status
	if err := b.call(t, lb, api.OpStatus, api.Empty{}, &st); err != nil {
		t.Fatal(err)
	}
	if st.BGP == nil || !st.BGP.Ready || len(st.BGP.Sessions) != 1 || !st.BGP.Sessions[0].Established || st.BGP.Sessions[0].PrefixesSent != 2 {
		t.Fatalf("lb status bgp: %+v", st.BGP)
	}
	// Every backend's app stops: the checks fail (fall 3 x 1s) and the routes go.
	var backends []topo.Node
	for _, n := range b.Topo.ByRole(topo.Backend) {
		backends = append(backends, n)
		if err := lab.StopProcess(b.Prefix, n.Name, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// web6 is alone on its address: its /128 goes. web shares 198.18.100.1 with the UDP echo
	// VIP, which has no health check (always healthy): the /32 stays, for echo.
	start := time.Now()
	testutil.Eventually(t, 20*time.Second, func() bool {
		return len(b.routeVia(t, netip.PrefixFrom(lab.WebVIP6, 128))) == 0
	}, "web6's route not withdrawn with no healthy backend")
	t.Logf("every backend down: web6's route withdrawn %s after the apps stopped", time.Since(start).Round(100*time.Millisecond))
	testutil.Eventually(t, 10*time.Second, func() bool {
		if err := b.call(t, lb, api.OpStatus, api.Empty{}, &st); err != nil {
			t.Fatal(err)
		}
		for _, v := range st.BGP.VIPs {
			if v.VIP == "web" && v.State == api.AnnounceNo {
				return true
			}
		}
		return false
	}, "web not withdrawn in lb status")
	for _, v := range st.BGP.VIPs {
		switch v.VIP {
		case "web", "web6":
			if v.State != api.AnnounceNo || !strings.HasPrefix(v.Reason, "no healthy backend") {
				t.Errorf("vip %s: %+v, want withdrawn for no healthy backend", v.VIP, v)
			}
		case "echo":
			if v.State != api.AnnounceYes {
				t.Errorf("vip echo (no health check): %+v, want announced", v)
			}
		}
	}
	if via := b.routeVia(t, webPrefix4); len(via) != 1 {
		t.Errorf("198.18.100.1/32 via %v: the echo VIP still has healthy backends, it must stay", via)
	}
	for _, n := range backends {
		for _, p := range b.Procs {
			if p.Name == n.Name {
				if _, err := lab.StartProcess(b.Prefix, p.Name, p.NS, p.Argv...); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if _, err := b.l.WaitVIPRoutes(b.lbs, 20*time.Second); err != nil {
		t.Fatalf("backends back: %v", err)
	}
	// SIGTERM with BGP drains: the routes go first, the program stays for the grace period,
	// then it is detached.
	pid := b.pid(t, lb.Name)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	testutil.Eventually(t, 5*time.Second, func() bool { return len(b.routeVia(t, webPrefix4)) == 0 }, "routes not withdrawn after SIGTERM")
	withdrawn := time.Since(start)
	if !xdpAttached(t, lb) {
		t.Error("the program went before the grace period ended")
	}
	testutil.Eventually(t, lab.BGPDrainGrace+10*time.Second, func() bool { return !xdpAttached(t, lb) }, "the program still attached after the grace period")
	t.Logf("SIGTERM: routes withdrawn in %s, program detached after %s (grace %s)", withdrawn.Round(time.Millisecond),
		time.Since(start).Round(100*time.Millisecond), lab.BGPDrainGrace)
	if time.Since(start) < lab.BGPDrainGrace {
		t.Errorf("detached after %s, before the grace period of %s", time.Since(start), lab.BGPDrainGrace)
	}
	// The link goes first (the program detaches), then the pin directory.
	testutil.Eventually(t, 5*time.Second, func() bool {
		_, err := os.Stat(lab.PinDir(lb.NS, lb.Iface))
		return os.IsNotExist(err)
	}, "the pins left after the drain")
}

// TestDrainNodeWithdrawsFirstAndBreaksNothing: `lb drain-node` on one of two balancers
// withdraws its routes at once, keeps its program for the grace period, then detaches and
// exits; the established connections work throughout, none broken, none moved.
func TestDrainNodeWithdrawsFirstAndBreaksNothing(t *testing.T) {
	b := newBGPLab(t, 2)
	lb1, lb2 := b.lbs[0], b.lbs[1]
	ka, first := openConns(t, b.l.Client(1), 40)
	grace := 4 * time.Second
	var res api.DrainNodeResult
	start := time.Now()
	if err := b.call(t, lb1, api.OpDrainNode, api.DrainNodeReq{Grace: grace}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Withdrawn) != 2 || res.Grace != grace {
		t.Errorf("drain result %+v", res)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		via := b.routeVia(t, webPrefix4)
		return len(via) == 1 && via[0] == lb2.Addr4
	}, "the router's route not through lb2 only")
	t.Logf("drain-node: lb1 withdrawn from the router in %s", time.Since(start).Round(time.Millisecond))
	var broken, moved int
	rounds := 0
	for time.Since(start) < grace-time.Second {
		bk, mv := requestAll(t, ka, first, fmt.Sprintf("grace%d", rounds))
		broken, moved, rounds = broken+bk, moved+mv, rounds+1
		if !xdpAttached(t, lb1) {
			t.Fatal("lb1's program went during the grace period")
		}
	}
	testutil.Eventually(t, grace+15*time.Second, func() bool {
		return !xdpAttached(t, lb1) && b.call(t, lb1, api.OpStatus, api.Empty{}, nil) != nil
	}, "lb1 still attached or its daemon still running")
	t.Logf("lb1 detached %s after drain-node (grace %s)", time.Since(start).Round(100*time.Millisecond), grace)
	bk, mv := requestAll(t, ka, first, "after")
	broken, moved = broken+bk, moved+mv
	t.Logf("%d connections, %d rounds of requests during the grace period and one after: %d broken, %d moved", len(ka), rounds+1, broken, moved)
	if broken != 0 || moved != 0 {
		t.Errorf("drain-node broke %d and moved %d connections, want none", broken, moved)
	}
	// lb2 alone serves new connections.
	c, err := dialKeepAlive(b.l.Client(1).NS, net.JoinHostPort(lab.WebVIP4.String(), "80"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.c.Close()
	if _, err := c.do("/new"); err != nil {
		t.Fatalf("new connection after the drain: %v", err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		_, err := os.Stat(lab.PinDir(lb1.NS, lb1.Iface))
		return os.IsNotExist(err)
	}, "lb1's pins left after the drain")
}

// TestBGPPeerDownNeverBlocksForwarding: a balancer daemon that starts while its router's BGP
// daemon is down comes up, serves its socket and forwards (through a static route put in the
// router by hand); when bird returns, the session comes up by itself and the VIP routes are
// learned again.
func TestBGPPeerDownNeverBlocksForwarding(t *testing.T) {
	b := newBGPLab(t, 1)
	lb := b.lbs[0]
	var birdProc, lbProc lab.Proc
	for _, p := range b.Procs {
		switch p.Name {
		case "bird":
			birdProc = p
		case lb.Name:
			lbProc = p
		}
	}
	if err := lab.StopProcess(b.Prefix, "bird", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() bool { return len(b.routeVia(t, webPrefix4)) == 0 }, "bird's routes not gone with bird")
	// The daemon restarts with nobody to talk BGP to (SIGKILL keeps the program attached; the
	// new daemon adopts it).
	if err := syscall.Kill(lbProc.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return b.call(t, lb, api.OpStatus, api.Empty{}, nil) != nil }, "lb1's daemon still answering")
	start := time.Now()
	if _, err := lab.StartProcess(b.Prefix, lbProc.Name, lbProc.NS, lbProc.Argv...); err != nil {
		t.Fatal(err)
	}
	var st api.Status
	testutil.Eventually(t, 15*time.Second, func() bool {
		return b.call(t, lb, api.OpStatus, api.Empty{}, &st) == nil && st.BGP != nil && st.BGP.Ready
	}, "the daemon not serving with its BGP peer down")
	t.Logf("daemon ready %s after its start, its router down", time.Since(start).Round(100*time.Millisecond))
	if len(st.BGP.Sessions) != 1 || st.BGP.Sessions[0].Established {
		t.Fatalf("sessions with bird down: %+v", st.BGP.Sessions)
	}
	// Forwarding works: a static route in the router stands in for BGP.
	if err := topo.SetRoute(b.Topo.RouterNS, webPrefix4, []netip.Addr{lb.Addr4}); err != nil {
		t.Fatal(err)
	}
	c := lab.HTTPClient(b.l.Client(1), false, 5*time.Second)
	testutil.Eventually(t, 20*time.Second, func() bool {
		code, _, _, err := get(c, "http://"+lab.WebVIP4.String()+"/peer-down")
		return err == nil && code == 200
	}, "no request through the daemon with its BGP session down")
	if err := topo.DelRoute(b.Topo.RouterNS, webPrefix4); err != nil {
		t.Fatal(err)
	}
	// bird returns: the session comes up on its own and the routes are learned again.
	if _, err := lab.StartProcess(b.Prefix, birdProc.Name, birdProc.NS, birdProc.Argv...); err != nil {
		t.Fatal(err)
	}
	d, err := b.l.WaitVIPRoutes(b.lbs, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bird back: VIP routes learned again after %s", d.Round(100*time.Millisecond))
}
