package bgp

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/switchyard/switchyard/lab/bird"
)

// TestBGPRoutePolicyWithBird: what bird2 receives of a prefix's attributes. Over the eBGP
// session (the lab's shape): the communities, the large communities and the MED, and no
// LOCAL_PREF of ours (bird shows its default 100: GoBGP sends LOCAL_PREF to iBGP peers only);
// over an iBGP session from the same speaker (bird's local AS set to the node's on the IPv6
// session): the LOCAL_PREF. A changed MED replaces the path in place (no withdrawal), and a
// prefix set back to no attributes loses them.
func TestBGPRoutePolicyWithBird(t *testing.T) {
	if v := os.Getenv(childEnv); v != "" {
		var a childArgs
		if err := json.Unmarshal([]byte(v), &a); err != nil {
			t.Fatal(err)
		}
		policyChild(t, a)
		return
	}
	rt, node, dir := routerAndNode(t, bird.Config{RouterID: routerAddr4, ASN: 65000, HoldTime: 3 * time.Second,
		Neighbors: []bird.Neighbor{
			{Name: "toext", Addr: nodeAddr4, ASN: 65001},
			{Name: "toint", Addr: nodeAddr6, ASN: 65001, LocalASN: 65001},
		}})
	a, _ := json.Marshal(childArgs{RouterNS: rt, BirdDir: dir})
	child := exec.Command("nsenter", "--net=/run/netns/"+node, "--", os.Args[0], "-test.run", "^TestBGPRoutePolicyWithBird$", "-test.v", "-test.count=1")
	child.Env = append(os.Environ(), childEnv+"="+string(a))
	out, err := child.CombinedOutput()
	t.Logf("speaker (in %s):\n%s", node, out)
	if err != nil {
		t.Fatalf("speaker test failed: %v", err)
	}
}

func policyChild(t *testing.T, a childArgs) {
	s, err := Start(Options{ASN: 65001, RouterID: nodeAddr4, NextHop4: nodeAddr4, NextHop6: nodeAddr6,
		Peers: []Peer{
			{Addr: routerAddr4, ASN: 65000, HoldTime: 3 * time.Second},
			{Addr: routerAddr6, ASN: 65001, HoldTime: 3 * time.Second},
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if err := s.Connect(false); err != nil {
		t.Fatal(err)
	}
	med, lp := uint32(10), uint32(200)
	s.Set(map[netip.Prefix]Attrs{vip4: {
		Communities:      []uint32{65001<<16 | 100, 65001<<16 | 200, 0xFFFFFF01},
		LargeCommunities: [][3]uint32{{65001, 1, 2}},
		MED:              &med, LocalPref: &lp,
	}})
	want := map[string]map[string]string{
		"toext": {"community": "(65001,100) (65001,200) (65535,65281)", "large_community": "(65001, 1, 2)", "med": "10", "local_pref": "100"},
		"toint": {"community": "(65001,100) (65001,200) (65535,65281)", "large_community": "(65001, 1, 2)", "med": "10", "local_pref": "200"},
	}
	waitPaths(t, a.BirdDir, vip4, want)

	// A new MED replaces the path: the route stays in the router's kernel throughout.
	med2 := uint32(500)
	s.Set(map[netip.Prefix]Attrs{vip4: {MED: &med2}})
	stop := make(chan struct{})
	lost := make(chan bool, 1)
	go func() {
		gone := false
		for {
			select {
			case <-stop:
				lost <- gone
				return
			default:
			}
			gone = gone || len(kernelVia(t, a.RouterNS, vip4)) == 0
			time.Sleep(5 * time.Millisecond)
		}
	}()
	waitPaths(t, a.BirdDir, vip4, map[string]map[string]string{"toext": {"med": "500", "community": ""}, "toint": {"med": "500", "local_pref": "100"}})
	close(stop)
	if <-lost {
		t.Error("the route left the router's kernel while its MED changed: the path must be replaced, not withdrawn first")
	}
	if c := s.Counts(); c.Replacements != 1 || c.Withdrawals != 0 {
		t.Errorf("counts %+v, want 1 replacement and no withdrawal", c)
	}
}

// waitPaths waits until bird holds p with, from each protocol named in want, the attributes
// given ("" for absent).
func waitPaths(t *testing.T, dir string, p netip.Prefix, want map[string]map[string]string) {
	t.Helper()
	var last string
	ok := func() bool {
		rs, err := bird.RoutesAll(dir)
		if err != nil {
			last = err.Error()
			return false
		}
		got := map[string]map[string]string{}
		for _, r := range rs {
			if r.Prefix == p.String() {
				for _, path := range r.Paths {
					got[path.From] = path.BGP
				}
			}
		}
		last = fmt.Sprint(got)
		for from, attrs := range want {
			g, ok := got[from]
			if !ok {
				return false
			}
			for k, v := range attrs {
				if g[k] != v {
					return false
				}
			}
		}
		return true
	}
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("bird's paths for %s: %s; want %v", p, last, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("bird's paths for %s: %s", p, last)
}
