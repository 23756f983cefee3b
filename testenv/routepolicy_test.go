package testenv

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/bird"
)

// TestBGPRoutePolicyInTheLab: two balancers with the VIPs in etcd. bird sees each VIP's
// communities (the node's 65001:100 plus web's 65001:201, web6's 65001:206) from both nodes;
// a change through lb1's CLI (`vip bgp web --announce-from lb2 --community 65001:250 --med 7`)
// reaches both nodes through the store: the router's route to web goes through lb2 only, with
// the new community and MED; a bad community and an unknown node are refused with the fix and
// the routes stay as they were.
func TestBGPRoutePolicyInTheLab(t *testing.T) {
	b := newBGPLabStore(t, 2, 1)
	lb1, lb2 := b.lbs[0], b.lbs[1]
	birdDir := lab.BirdDir(b.Prefix)
	web4, web6 := netip.PrefixFrom(lab.WebVIP4, 32), netip.PrefixFrom(lab.WebVIP6, 128)
	want := func(p netip.Prefix, from []string, attr, val string) func() bool {
		return func() bool {
			rs, err := bird.RoutesAll(birdDir)
			if err != nil {
				return false
			}
			for _, r := range rs {
				if r.Prefix != p.String() {
					continue
				}
				var got []string
				for _, path := range r.Paths {
					if path.BGP[attr] != val {
						return false
					}
					got = append(got, path.From)
				}
				return strings.Join(got, ",") == strings.Join(from, ",")
			}
			return false
		}
	}
	waitFor(t, 20*time.Second, want(web4, []string{lb1.Name, lb2.Name}, "community", "(65001,100) (65001,201)"), "web's paths from lb1 and lb2 with communities 65001:100 65001:201")
	waitFor(t, 5*time.Second, want(web6, []string{lb1.Name, lb2.Name}, "community", "(65001,100) (65001,206)"), "web6's paths with 65001:206")

	med := uint32(7)
	set := &config.VIPBGP{RoutePolicy: config.RoutePolicy{Communities: []string{"65001:250"}, MED: &med}, AnnounceFrom: []string{lb2.Name}}
	var res api.ChangeResult
	if err := b.call(t, lb1, api.OpVIPBGP, api.VIPBGPReq{VIP: "web", BGP: set}, &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("vip bgp web: %s (%s)", res.Message, res.Saved)
	waitFor(t, 10*time.Second, want(web4, []string{lb2.Name}, "community", "(65001,100) (65001,250)"), "web's route from lb2 only with 65001:250")
	waitFor(t, 5*time.Second, want(web4, []string{lb2.Name}, "med", "7"), "web's MED 7")
	if via := b.routeVia(t, web4); len(via) != 1 || via[0] != lb2.Addr4 {
		t.Errorf("router's kernel route to web via %v, want lb2 only", via)
	}
	var st api.Status
	if err := b.call(t, lb1, api.OpStatus, api.Empty{}, &st); err != nil {
		t.Fatal(err)
	}
	for _, v := range st.BGP.VIPs {
		if v.VIP == "web" && (v.State != api.AnnounceNo || !strings.Contains(v.Reason, "announce_from [lb2] does not include this node (lb1")) {
			t.Errorf("lb1's status of web: %+v", v)
		}
	}

	for _, bad := range []struct {
		bgp  *config.VIPBGP
		want string
	}{
		{&config.VIPBGP{RoutePolicy: config.RoutePolicy{Communities: []string{"65000:x"}}}, `community "65000:x": use ASN:VALUE`},
		{&config.VIPBGP{AnnounceFrom: []string{"lb9"}}, `names node or label "lb9", which no node of the fleet has (known: ` + lb1.Name},
	} {
		err := b.call(t, lb2, api.OpVIPBGP, api.VIPBGPReq{VIP: "web", BGP: bad.bgp}, nil)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("vip bgp %+v: %v, want %q", bad.bgp, err, bad.want)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if !want(web4, []string{lb2.Name}, "community", "(65001,100) (65001,250)")() {
		t.Error("a refused change moved the routes")
	}
	out, _ := bird.RoutesAll(birdDir)
	t.Logf("birdc show route all:\n%+v", out)
}

// waitFor polls cond every 50 ms until it holds or the timeout ends.
func waitFor(t *testing.T, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
