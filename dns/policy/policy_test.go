package policy

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/dns/geoip"
)

// fakeHealth is a table of states; the policies only read it, the probing is tested in health.
type fakeHealth struct {
	down map[string]bool
	rtt  map[string]time.Duration
}

func (f fakeHealth) Up(k string) bool           { return !f.down[k] }
func (f fakeHealth) RTT(k string) time.Duration { return f.rtt[k] }
func site(n string, w float64, a string) SiteSpec {
	return SiteSpec{Name: n, Weight: w, Addresses: []string{a}}
}

// compile checks n as app.p.test. (with config's defaults for what it leaves out) and compiles it.
func compile(t *testing.T, n Spec, groups map[string][]string) *Name {
	t.Helper()
	n.FQDN, n.TTL = "app.p.test.", 60
	if n.AllDown == "" {
		n.AllDown = "fail-closed"
	}
	if n.Answers == 0 {
		n.Answers = 1
	}
	if err := n.Validate(groups); err != nil {
		t.Fatal(err)
	}
	return Compile([]Spec{n})["app.p.test."]
}

func TestWeightedSeveralAnswers(t *testing.T) {
	n := compile(t, Spec{Policy: "weighted", Answers: 2,
		Sites: []SiteSpec{site("a", 5, "192.0.2.1"), site("b", 3, "192.0.2.2"), site("c", 2, "192.0.2.3")}}, nil)
	first := map[int]int{}
	for i := 0; i < 10; i++ {
		d := n.Decide("", fakeHealth{})
		if len(d.Sites) != 2 || d.Sites[0] == d.Sites[1] {
			t.Fatalf("decision %v, want two distinct sites", d.Sites)
		}
		first[d.Sites[0]]++
	}
	if first[0] != 5 || first[1] != 3 || first[2] != 2 {
		t.Fatalf("first records %v, want 5/3/2 per 10", first)
	}
	// A down site leaves the rotation.
	h := fakeHealth{down: map[string]bool{"app.p.test./a": true}}
	for i := 0; i < 10; i++ {
		if d := n.Decide("", h); d.Sites[0] == 0 || d.Sites[1] == 0 {
			t.Fatalf("down site answered: %v", d.Sites)
		}
	}
}

func TestLatencyConfiguredAndMeasured(t *testing.T) {
	n := compile(t, Spec{Policy: "latency",
		Latency: map[string]map[string]float64{"g1": {"a": 5, "b": 1}},
		Sites:   []SiteSpec{site("a", 0, "192.0.2.1"), site("b", 0, "192.0.2.2")}},
		map[string][]string{"g1": {"10.0.0.0/8"}})
	h := fakeHealth{rtt: map[string]time.Duration{"app.p.test./a": 2 * time.Millisecond, "app.p.test./b": 7 * time.Millisecond}}
	if d := n.Decide("g1", h); d.Sites[0] != 1 {
		t.Fatalf("g1 got site %d, want b (configured 1 < 5)", d.Sites[0])
	}
	// No row for the client: the measured probe round trips decide (a: 2 ms < b: 7 ms).
	if d := n.Decide("", h); d.Sites[0] != 0 {
		t.Fatalf("default got site %d, want a (measured)", d.Sites[0])
	}
	h.down = map[string]bool{"app.p.test./b": true}
	if d := n.Decide("g1", h); d.Sites[0] != 0 {
		t.Fatalf("g1 with b down got %d, want a", d.Sites[0])
	}
}

func TestChainsAndAllDown(t *testing.T) {
	mk := func(allDown string) *Name {
		return compile(t, Spec{Policy: "failover", AllDown: allDown, Chain: []string{"a", "b"},
			Sites: []SiteSpec{site("a", 0, "192.0.2.1"), site("b", 0, "192.0.2.2"), site("c", 0, "192.0.2.3")}}, nil)
	}
	n := mk("fail-closed")
	down := map[string]bool{}
	h := fakeHealth{down: down}
	for _, step := range []struct {
		kill   string
		site   int
		reason string
	}{{"", 0, "primary"}, {"app.p.test./a", 1, "fallback"}, {"app.p.test./b", 2, "fallback"}, {"app.p.test./c", -1, "all-down-fail-closed"}} {
		if step.kill != "" {
			down[step.kill] = true
		}
		d := n.Decide("", h)
		if d.Reason != step.reason || (step.site >= 0 && d.Sites[0] != step.site) || (step.site < 0 && len(d.Sites) != 0) {
			t.Fatalf("after killing %q: %+v, want site %d reason %s", step.kill, d, step.site, step.reason)
		}
	}
	if d := mk("answer-all").Decide("", h); len(d.Sites) != 3 || d.Reason != "all-down-answer-all" {
		t.Fatalf("answer-all: %+v", d)
	}
}

func TestGroupsLongestPrefix(t *testing.T) {
	g, err := NewGroups(map[string][]string{"wide": {"10.0.0.0/8"}, "narrow": {"10.1.2.0/24"}, "v6": {"2001:db8::/32"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{"10.1.2.3": "narrow", "10.9.9.9": "wide", "2001:db8::1": "v6", "::ffff:10.1.2.3": "narrow", "192.0.2.1": ""} {
		got, _, _ := g.Match(netip.MustParseAddr(addr))
		if got != want {
			t.Errorf("%s -> %q, want %q", addr, got, want)
		}
	}
}

// Validate names the field of a table that refers to a site or a group the name does not have.
func TestValidateNamesTheField(t *testing.T) {
	sites := []SiteSpec{site("a", 0, "192.0.2.1")}
	for _, c := range []struct {
		spec Spec
		want string
	}{
		{Spec{Policy: Failover, Chain: []string{"a", "y"}, Sites: sites}, `field chain: site "y" is not among this name's sites`},
		{Spec{Policy: Geolocation, Geo: map[string][]string{"default": {"a"}, "g": {"a"}}, Sites: sites}, `field geo.g: group "g" is not defined`},
		{Spec{Policy: "random", Sites: sites}, `field policy: "random" is unknown; use geolocation, latency, weighted or failover`},
	} {
		if err := c.spec.Validate(nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.spec.Policy, err, c.want)
		}
	}
}

// Nearest by coordinates: a located client whose group has no chain goes to the nearest live
// site, then the next nearest; a group with a chain and an unlocated client keep the table.
func TestNearestSite(t *testing.T) {
	spec := Spec{FQDN: "app.x.", Policy: Geolocation, Geo: map[string][]string{"eu": {"tyo"}, "default": {"fra"}},
		Sites: []SiteSpec{{Name: "fra", Addresses: []string{"192.0.2.1"}, Coordinates: []float64{50.1, 8.7}},
			{Name: "nyc", Addresses: []string{"192.0.2.2"}, Coordinates: []float64{40.7, -74}},
			{Name: "tyo", Addresses: []string{"192.0.2.3"}, Coordinates: []float64{35.7, 139.7}}}}
	if err := spec.Validate(map[string][]string{"eu": nil}); err != nil {
		t.Fatal(err)
	}
	n := Compile([]Spec{spec})["app.x."]
	boston := Client{Located: true, Loc: geoip.Location{Lat: 42.36, Lon: -71.06, HasCoords: true}}
	h := fakeHealth{down: map[string]bool{}}
	for _, c := range []struct {
		client Client
		down   string
		site   string
		reason string
	}{
		{boston, "", "nyc", "nearest"},
		{boston, "app.x./nyc", "fra", "fallback"}, // Boston: Frankfurt is nearer than Tokyo
		{Client{Group: "eu", Located: true, Loc: boston.Loc}, "", "tyo", "primary"},
		{Client{}, "", "fra", "primary"},
	} {
		h.down = map[string]bool{c.down: true}
		d := n.DecideFor(c.client, h)
		if len(d.Sites) != 1 || n.Sites[d.Sites[0]].Name != c.site || d.Reason != c.reason {
			t.Errorf("%+v down %q: %v %s, want %s %s", c.client, c.down, d.Sites, d.Reason, c.site, c.reason)
		}
	}
	spec.Policy = Failover
	spec.Chain = []string{"fra"}
	if err := spec.Validate(nil); err == nil {
		t.Error("coordinates on a failover name accepted")
	}
}
