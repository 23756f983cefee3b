package bgp

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab/bird"
)

// The test runs the speaker in a namespace of its own: GoBGP dials from whatever thread its
// goroutines run on, so the whole process must be in the namespace. The parent builds a router
// namespace running bird2 and a node namespace joined by a veth pair, then runs this test again
// inside the node namespace (childEnv set), where the speaker runs.
const childEnv = "SWITCHYARD_BGP_TEST_CHILD"

var (
	routerAddr4 = netip.MustParseAddr("198.18.250.1")
	nodeAddr4   = netip.MustParseAddr("198.18.250.2")
	routerAddr6 = netip.MustParseAddr("fd00:5e:250::1")
	nodeAddr6   = netip.MustParseAddr("fd00:5e:250::2")
	vip4        = netip.MustParsePrefix("198.18.100.1/32")
	vip6        = netip.MustParsePrefix("fd00:5e:100::1/128")
)

type childArgs struct {
	RouterNS, BirdDir string
	Port              uint16
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestBGPSpeakerWithBird: the speaker's session with a real bird2 comes up; a prefix it is
// given appears in the router's kernel table through it, disappears when withdrawn, and goes
// when the speaker stops; a session to a port nobody answers on stays down without blocking
// anything.
func TestBGPSpeakerWithBird(t *testing.T) {
	if v := os.Getenv(childEnv); v != "" {
		var a childArgs
		if err := json.Unmarshal([]byte(v), &a); err != nil {
			t.Fatal(err)
		}
		speakerChild(t, a)
		return
	}
	rt, node, dir := routerAndNode(t, bird.Config{RouterID: routerAddr4, ASN: 65000, HoldTime: 3 * time.Second,
		Neighbors: []bird.Neighbor{{Name: "node", Addr: nodeAddr4, ASN: 65001, Password: "lab-secret"}}})
	a, _ := json.Marshal(childArgs{RouterNS: rt, BirdDir: dir})
	child := exec.Command("nsenter", "--net=/run/netns/"+node, "--", os.Args[0], "-test.run", "^TestBGPSpeakerWithBird$", "-test.v", "-test.count=1")
	child.Env = append(os.Environ(), childEnv+"="+string(a))
	out, err := child.CombinedOutput()
	t.Logf("speaker (in %s):\n%s", node, out)
	if err != nil {
		t.Fatalf("speaker test failed: %v", err)
	}
}

// routerAndNode builds a router namespace running bird with c and a node namespace joined to it
// by a veth pair; everything goes when the test ends.
func routerAndNode(t *testing.T, c bird.Config) (rt, node, dir string) {
	t.Helper()
	testutil.RequireRoot(t)
	if err := bird.Available(); err != nil {
		t.Skip(err)
	}
	b := make([]byte, 3)
	rand.Read(b)
	pfx := "tb" + hex.EncodeToString(b)
	rt, node = pfx+"-rt", pfx+"-n"
	testutil.NamedNS(t, rt)
	testutil.NamedNS(t, node)
	run(t, "ip", "-n", rt, "link", "add", "r0", "type", "veth", "peer", "name", "n0", "netns", node)
	for _, c := range [][]string{
		{"ip", "-n", rt, "addr", "add", routerAddr4.String() + "/24", "dev", "r0"},
		{"ip", "-n", rt, "addr", "add", routerAddr6.String() + "/64", "dev", "r0", "nodad"},
		{"ip", "-n", node, "addr", "add", nodeAddr4.String() + "/24", "dev", "n0"},
		{"ip", "-n", node, "addr", "add", nodeAddr6.String() + "/64", "dev", "n0", "nodad"},
		{"ip", "-n", rt, "link", "set", "r0", "up"}, {"ip", "-n", node, "link", "set", "n0", "up"},
		{"ip", "-n", rt, "link", "set", "lo", "up"}, {"ip", "-n", node, "link", "set", "lo", "up"},
	} {
		run(t, c...)
	}
	dir = t.TempDir()
	if err := bird.Write(dir, c); err != nil {
		t.Fatal(err)
	}
	bc := exec.Command("nsenter", append([]string{"--net=/run/netns/" + rt, "--"}, bird.Argv(dir)...)...)
	blog := &testutil.SyncBuffer{}
	bc.Stdout, bc.Stderr = blog, blog
	if err := bc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		bc.Process.Signal(syscall.SIGTERM)
		bc.Wait()
		if t.Failed() {
			t.Logf("bird log:\n%s", blog.String())
		}
	})
	if err := bird.WaitReady(dir, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return rt, node, dir
}

// kernelVia returns the next hops of the router's kernel route to p ("" when none).
func kernelVia(t *testing.T, ns string, p netip.Prefix) []string {
	t.Helper()
	fam := "-4"
	if p.Addr().Is6() {
		fam = "-6"
	}
	out, err := exec.Command("ip", fam, "-n", ns, "-j", "route", "show", "exact", p.String()).Output()
	if err != nil {
		t.Fatalf("ip route: %v", err)
	}
	var rs []struct {
		Gateway  string `json:"gateway"`
		Protocol string `json:"protocol"`
		Nexthops []struct {
			Gateway string `json:"gateway"`
		} `json:"nexthops"`
	}
	if err := json.Unmarshal(out, &rs); err != nil {
		t.Fatalf("parse %s: %v", out, err)
	}
	var via []string
	for _, r := range rs {
		if r.Gateway != "" {
			via = append(via, r.Gateway)
		}
		for _, n := range r.Nexthops {
			via = append(via, n.Gateway)
		}
	}
	return via
}

func speakerChild(t *testing.T, a childArgs) {
	s, err := Start(Options{ASN: 65001, RouterID: nodeAddr4, NextHop4: nodeAddr4, NextHop6: nodeAddr6,
		Peers: []Peer{
			{Addr: routerAddr4, ASN: 65000, HoldTime: 3 * time.Second, Password: "lab-secret"},
			// Nobody listens there: the session stays down, and nothing waits for it.
			{Addr: routerAddr6, ASN: 65000, Port: 1790, HoldTime: 3 * time.Second},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Connect(false); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()
	s.Set(plain(vip4, vip6))
	if err := s.Flush(); err != nil {
		t.Fatalf("announce with no session up: %v", err)
	}
	testutil.Eventually(t, 20*time.Second, func() bool {
		ps, err := bird.Protocols(a.BirdDir)
		return err == nil && len(ps) > 0 && anyEstablished(ps)
	}, "no session with bird established")
	up := time.Now()
	testutil.Eventually(t, 10*time.Second, func() bool {
		return fmt.Sprint(kernelVia(t, a.RouterNS, vip4)) == "["+nodeAddr4.String()+"]" &&
			fmt.Sprint(kernelVia(t, a.RouterNS, vip6)) == "["+nodeAddr6.String()+"]"
	}, "the VIP routes are not both in the router's kernel table")
	t.Logf("routes installed %s after the session came up", time.Since(up))
	ss, err := s.Sessions(t.Context())
	if err != nil || len(ss) != 2 {
		t.Fatalf("sessions: %v %+v", err, ss)
	}
	for _, se := range ss {
		switch se.Peer {
		case routerAddr4.String():
			if !se.Established || se.PrefixesSent != 2 || se.UpdatesSent == 0 || se.HoldTime != 3 {
				t.Errorf("session with bird: %+v", se)
			}
		default:
			if se.Established || se.State == "" {
				t.Errorf("session with nobody: %+v", se)
			}
		}
	}
	checkMetrics(t, s)
	rs, err := bird.Routes(a.BirdDir)
	if err != nil || len(rs) != 2 || rs[0].Paths[0].From != "node" {
		t.Errorf("bird routes: %v %+v", err, rs)
	}

	s.Set(plain(vip6))
	withdrawn := time.Now()
	testutil.Eventually(t, 10*time.Second, func() bool { return len(kernelVia(t, a.RouterNS, vip4)) == 0 }, "the IPv4 VIP was not withdrawn")
	t.Logf("withdrawal reached the router's kernel in %s", time.Since(withdrawn))
	if len(kernelVia(t, a.RouterNS, vip6)) != 1 {
		t.Error("the IPv6 VIP went with the IPv4 one")
	}
	if c := s.Counts(); c.Announcements != 2 || c.Withdrawals != 1 {
		t.Errorf("counts %+v", c)
	}
	s.Set(plain(vip4, vip6))
	testutil.Eventually(t, 10*time.Second, func() bool { return len(kernelVia(t, a.RouterNS, vip4)) == 1 }, "the IPv4 VIP did not come back")

	start := time.Now()
	s.Stop()
	stopped = true
	testutil.Eventually(t, 5*time.Second, func() bool {
		return len(kernelVia(t, a.RouterNS, vip4)) == 0 && len(kernelVia(t, a.RouterNS, vip6)) == 0
	}, "routes left after stop")
	t.Logf("stop to routes gone: %s", time.Since(start).Round(time.Millisecond))
}

// plain is the prefixes with no attributes, as Set takes them.
func plain(ps ...netip.Prefix) map[netip.Prefix]Attrs {
	m := map[netip.Prefix]Attrs{}
	for _, p := range ps {
		m[p] = Attrs{}
	}
	return m
}

func anyEstablished(ps []bird.Protocol) bool {
	for _, p := range ps {
		if p.Established() {
			return true
		}
	}
	return false
}

// checkMetrics reads the speaker's metrics through a registry, as /metrics does.
func checkMetrics(t *testing.T, s *Speaker) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"switchyard_l4_bgp_session_established,peer=198.18.250.1":             1,
		"switchyard_l4_bgp_session_established,peer=[fd00:5e:250::1]:1790":    0,
		"switchyard_l4_bgp_session_state,peer=198.18.250.1,state=established": 1,
		"switchyard_l4_bgp_prefixes_sent,peer=198.18.250.1":                   2,
		"switchyard_l4_bgp_announced_prefixes":                                2,
		"switchyard_l4_bgp_announcements_total":                               2,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("metric %s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	if got["switchyard_l4_bgp_updates_sent_total,peer=198.18.250.1"] == 0 {
		t.Error("no UPDATE counted as sent")
	}
}
