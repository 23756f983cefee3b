package edge

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/edge/relay"
	"github.com/switchyard/switchyard/internal/testutil"
)

// tierLab is two origins (a.test, b.test), three upper-tier edges at different emulated
// distances from each, and a way to start lower edges in front of them, all on loopback.
type tierLab struct {
	origins map[string]*testOrigin // by host
	uppers  []*Edge
}

func startRelay(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	r, err := relay.Start("127.0.0.1:0", strings.TrimPrefix(target, "http://"), delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return "http://" + r.Addr()
}

// newTierLab: upper j's one-way delay to a.test is delays[j], to b.test delays[2-j], so the
// nearest upper tier of a.test is 0 and of b.test is 2; 1 is second for both.
func newTierLab(t *testing.T) *tierLab {
	t.Helper()
	l := &tierLab{origins: map[string]*testOrigin{}}
	for _, h := range []string{"a.test", "b.test"} {
		l.origins[h] = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			fmt.Fprintf(w, "%s %s", r.Host, r.URL.Path)
		})
	}
	delays := []time.Duration{1 * time.Millisecond, 8 * time.Millisecond, 25 * time.Millisecond}
	for j := range 3 {
		a := startRelay(t, l.origins["a.test"].URL, delays[j])
		b := startRelay(t, l.origins["b.test"].URL, delays[2-j])
		l.uppers = append(l.uppers, newEdge(t, "", func(c *Config) {
			c.Origins = []OriginConfig{{Hosts: []string{"a.test"}, URL: a}, {Hosts: []string{"b.test"}, URL: b}}
		}))
	}
	return l
}

func (l *tierLab) upperURLs() []string {
	var out []string
	for _, u := range l.uppers {
		out = append(out, u.URL())
	}
	return out
}

// lower starts a lower edge whose two origins both use the given tier section.
func (l *tierLab) lower(t *testing.T, tc TierConfig) *Edge {
	t.Helper()
	tc.ProbeInterval = Duration(time.Hour) // the tests probe themselves
	return newEdge(t, "", func(c *Config) {
		c.Origins = []OriginConfig{
			{Hosts: []string{"a.test"}, URL: l.origins["a.test"].URL, Tiers: tc},
			{Hosts: []string{"b.test"}, URL: l.origins["b.test"].URL, Tiers: tc},
		}
	})
}

// upperRequests is how many requests from lower tiers upper j answered for an origin.
func upperRequests(e *Edge, origin string) int64 {
	for _, o := range e.OriginStats() {
		if o.Origin == origin {
			return o.Upper.Requests
		}
	}
	return -1
}

func originStats(t *testing.T, e *Edge, origin string) OriginStats {
	t.Helper()
	for _, o := range e.OriginStats() {
		if o.Origin == origin {
			return o
		}
	}
	t.Fatalf("no stats for origin %s", origin)
	return OriginStats{}
}

// TestSmartTopologyPicksPerOrigin: each origin gets the candidate nearest to it as primary and
// the second nearest as fallback; misses go through the primary, and two lower edges reach each
// origin through one upper tier only. The analytics count what happened.
func TestSmartTopologyPicksPerOrigin(t *testing.T) {
	t.Parallel()
	l := newTierLab(t)
	urls := l.upperURLs()
	lowers := []*Edge{l.lower(t, TierConfig{Candidates: urls}), l.lower(t, TierConfig{Candidates: urls})}
	for _, lo := range lowers {
		lo.ProbeTiers()
		a, b := originStats(t, lo, "a.test"), originStats(t, lo, "b.test")
		if a.Topology != TopologySmart || a.Primary != urls[0] || a.Secondary != urls[1] {
			t.Fatalf("a.test: primary %s secondary %s, want %s %s; %+v", a.Primary, a.Secondary, urls[0], urls[1], a.Tiers)
		}
		if b.Primary != urls[2] || b.Secondary != urls[1] {
			t.Fatalf("b.test: primary %s secondary %s, want %s %s; %+v", b.Primary, b.Secondary, urls[2], urls[1], b.Tiers)
		}
	}
	for i, lo := range lowers {
		for _, host := range []string{"a.test", "b.test"} {
			for range 2 {
				r := get(t, lo.URL()+"/x", "Host", host)
				if r.status != 200 || r.body != host+" /x" {
					t.Fatalf("lower %d %s: %d %q", i, host, r.status, r.body)
				}
			}
		}
	}
	// One origin request per origin, from its primary upper tier only.
	for host, o := range l.origins {
		if n := o.hits("/x"); n != 1 {
			t.Errorf("%s got %d requests for /x, want 1", host, n)
		}
	}
	if upperRequests(l.uppers[0], "a.test") != 2 || upperRequests(l.uppers[1], "a.test") != 0 || upperRequests(l.uppers[2], "a.test") != 0 ||
		upperRequests(l.uppers[2], "b.test") != 2 || upperRequests(l.uppers[0], "b.test") != 0 {
		t.Errorf("upper tiers answered a.test %d/%d/%d, b.test %d/%d/%d; want 2/0/0 and 0/0/2",
			upperRequests(l.uppers[0], "a.test"), upperRequests(l.uppers[1], "a.test"), upperRequests(l.uppers[2], "a.test"),
			upperRequests(l.uppers[0], "b.test"), upperRequests(l.uppers[1], "b.test"), upperRequests(l.uppers[2], "b.test"))
	}
	// Analytics: the first lower missed once and hit once per origin and reached the origin only
	// through the tier; the second was answered by the upper tier's cache (a saved request).
	a0, a1 := originStats(t, lowers[0], "a.test"), originStats(t, lowers[1], "a.test")
	if a0.Lower.Requests != 2 || a0.Lower.Hits != 1 || a0.TierRequests != 1 || a0.UpperHits != 0 ||
		a0.Lower.OriginRequests != 0 || a0.TierBytes != int64(len("a.test /x")) || a0.Lower.BytesServed != 2*int64(len("a.test /x")) {
		t.Errorf("first lower's a.test analytics: %+v", a0)
	}
	if a1.TierRequests != 1 || a1.UpperHits != 1 {
		t.Errorf("second lower's a.test analytics: %+v (want its one tier request answered from the upper cache)", a1)
	}
	up := originStats(t, l.uppers[0], "a.test")
	if up.Upper.Requests != 2 || up.Upper.Hits != 1 || up.Upper.OriginRequests != 1 || up.Upper.OriginBytes != int64(len("a.test /x")) || up.Lower.Requests != 0 {
		t.Errorf("upper tier's a.test analytics: %+v", up)
	}
	// The same figures as metrics.
	reg := lowers[1].Registry()
	for _, o := range []string{"a.test", "b.test"} {
		if v := metricValue(t, reg, "switchyard_edge_tier_saved_origin_requests_total", "origin", o); v != 1 {
			t.Errorf("saved origin requests metric for %s = %v, want 1", o, v)
		}
		if v := metricValue(t, reg, "switchyard_edge_tier_requests_total", "origin", o, "role", "lower"); v != 2 {
			t.Errorf("tier requests metric for %s = %v, want 2", o, v)
		}
	}
	if v := metricValue(t, reg, "switchyard_edge_tier_selected", "origin", "a.test", "tier", urls[0], "rank", "primary"); v != 1 {
		t.Errorf("selected metric for a.test's primary = %v, want 1", v)
	}
}

// metricValue returns the value of the series of name whose labels include the pairs given, or
// -1 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// TestSmartTopologyFallback: the primary dies, misses go to the fallback; the fallback dies
// too, misses go to the origin directly; a probe takes the dead tiers out of the ranking.
func TestSmartTopologyFallback(t *testing.T) {
	t.Parallel()
	l := newTierLab(t)
	lo := l.lower(t, TierConfig{Candidates: l.upperURLs()})
	lo.ProbeTiers()
	expect(t, get(t, lo.URL()+"/1", "Host", "a.test"), 200, Miss, "a.test /1")
	if upperRequests(l.uppers[0], "a.test") != 1 {
		t.Fatal("first miss did not go through the primary")
	}
	l.uppers[0].Close()
	expect(t, get(t, lo.URL()+"/2", "Host", "a.test"), 200, Miss, "a.test /2")
	if upperRequests(l.uppers[1], "a.test") != 1 {
		t.Fatalf("with the primary dead the miss did not go through the fallback: %+v", originStats(t, lo, "a.test"))
	}
	l.uppers[1].Close()
	expect(t, get(t, lo.URL()+"/3", "Host", "a.test"), 200, Miss, "a.test /3")
	a := originStats(t, lo, "a.test")
	if a.Lower.OriginRequests != 1 || a.Fallbacks < 2 || lo.Stats().TierFallbacks.Load() < 2 {
		t.Fatalf("with both tiers dead: %+v, want one direct origin request and 2 fallbacks", a)
	}
	lo.ProbeTiers()
	a = originStats(t, lo, "a.test")
	if a.Primary != l.uppers[2].URL() || a.Secondary != "" {
		t.Fatalf("after the probe: primary %q secondary %q, want only the surviving tier", a.Primary, a.Secondary)
	}
}

// TestGenericTopologyHashesURL: every lower sends a URL to the same tier (rendezvous hash), the
// URLs spread over more than one tier, and a dead tier's URLs go to their next tier.
func TestGenericTopologyHashesURL(t *testing.T) {
	t.Parallel()
	l := newTierLab(t)
	tc := TierConfig{Topology: TopologyGeneric, Candidates: l.upperURLs()}
	lowers := []*Edge{l.lower(t, tc), l.lower(t, tc)}
	used := map[int]bool{}
	for i := range 12 {
		path := fmt.Sprintf("/g%d", i)
		before := make([]int64, 3)
		for j, u := range l.uppers {
			before[j] = upperRequests(u, "a.test")
		}
		for _, lo := range lowers {
			expect(t, get(t, lo.URL()+path, "Host", "a.test"), 200, Miss, "a.test "+path)
		}
		got := -1
		for j, u := range l.uppers {
			switch d := upperRequests(u, "a.test") - before[j]; d {
			case 0:
			case 2:
				got = j
			default:
				t.Fatalf("%s: upper %d answered %d of the 2 lowers' misses; want both or none", path, j, d)
			}
		}
		if got < 0 {
			t.Fatalf("%s reached no upper tier", path)
		}
		used[got] = true
		if l.origins["a.test"].hits(path) != 1 {
			t.Fatalf("%s reached the origin %d times, want 1", path, l.origins["a.test"].hits(path))
		}
	}
	if len(used) < 2 {
		t.Fatalf("12 URLs all hashed to one tier: %v", used)
	}
	// Kill one tier; its URLs now go to another tier, not the origin directly.
	l.uppers[0].Close()
	for i := range 12 {
		get(t, lowers[0].URL()+fmt.Sprintf("/k%d", i), "Host", "a.test")
	}
	if a := originStats(t, lowers[0], "a.test"); a.Lower.OriginRequests != 0 {
		t.Fatalf("with one of three generic tiers dead, %d misses went to the origin directly", a.Lower.OriginRequests)
	}
}

// TestCustomTopology: the explicit map sends each origin's misses to its named upper tier,
// then to its named fallback.
func TestCustomTopology(t *testing.T) {
	t.Parallel()
	l := newTierLab(t)
	u := l.upperURLs()
	lo := newEdge(t, "", func(c *Config) {
		c.Origins = []OriginConfig{
			{Hosts: []string{"a.test"}, URL: l.origins["a.test"].URL, Tiers: TierConfig{Upper: []string{u[2], u[1]}}},
			{Hosts: []string{"b.test"}, URL: l.origins["b.test"].URL, Tiers: TierConfig{Topology: TopologyCustom, Upper: []string{u[0]}}},
		}
	})
	expect(t, get(t, lo.URL()+"/c", "Host", "a.test"), 200, Miss, "a.test /c")
	expect(t, get(t, lo.URL()+"/c", "Host", "b.test"), 200, Miss, "b.test /c")
	if upperRequests(l.uppers[2], "a.test") != 1 || upperRequests(l.uppers[0], "b.test") != 1 {
		t.Fatal("custom map not followed")
	}
	if a := originStats(t, lo, "a.test"); a.Topology != TopologyCustom || a.Primary != u[2] || a.Secondary != u[1] {
		t.Fatalf("custom a.test: %+v", a)
	}
	l.uppers[2].Close()
	expect(t, get(t, lo.URL()+"/d", "Host", "a.test"), 200, Miss, "a.test /d")
	if upperRequests(l.uppers[1], "a.test") != 1 {
		t.Fatal("custom fallback not used")
	}
}

// TestUpperTierGoesToOrigin: a request from a lower tier is fetched from the origin directly
// even when the upper tier has tiers of its own (no loops), without the tier marker.
func TestUpperTierGoesToOrigin(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "o")
	})
	other := newEdge(t, o.URL, nil)
	up := newEdge(t, o.URL, func(c *Config) { c.Tiers.Upper = []string{other.URL()} })
	r := get(t, up.URL()+"/u", TierHeader, testTierToken)
	if r.status != 200 || other.Stats().Misses.Load() != 0 || o.last().Header.Get(TierHeader) != "" {
		t.Fatalf("upper tier forwarded a lower tier's request to its own tier, or leaked the marker: %d, other misses %d",
			r.status, other.Stats().Misses.Load())
	}
}

func TestOriginsConfigErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, want string }{
		{"origins:\n  - hosts: [a]\n", "line 2: field origins.1.url: missing"},
		{"origins:\n  - hosts: [a]\n    url: http://x:1\n  - url: http://y:1\n", "line 4: field origins.2.hosts: missing"},
		{"origins:\n  - hosts: [a]\n    url: http://x:1\n  - hosts: [A]\n    url: http://y:1\n", "line 4: field origins.2.hosts: \"A\" is already served by origins entry 1"},
		{"origins:\n  - hosts: [a]\n    url: http://x:1\n    tiers:\n      topology: nearest\n", "line 5: field origins.1.tiers.topology: \"nearest\" is not smart"},
		{"origins:\n  - hosts: [a]\n    url: http://x:1\n    tiers:\n      topology: generic\n", "line 5: field origins.1.tiers.topology: generic needs tiers.candidates"},
		{"origin: http://x:1\ntiers:\n  topology: custom\n", "line 3: field tiers.topology: custom needs tiers.upper"},
		{"origin: http://x:1\ntiers:\n  upper: [nope]\n", "line 3: field tiers.upper: entry 1"},
		{"origins:\n  - hosts: [a]\n    url: http://x:1\n    bogus: 1\n", "line 4: origins[0].bogus: unknown field"},
		{"origins:\n  - hosts: [a]\n    url: http://x:1\ntiers:\n  candidates: [http://u:1]\n", "line 4: field tiers: applies to origin, which is not set"},
	} {
		t.Run(c.yaml, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q: error %v, want it to contain %q", c.yaml, err, c.want)
			}
		})
	}
	cfg, err := ParseConfig([]byte("origins:\n  - hosts: [a.test]\n    url: http://x:1\n    tiers:\n      candidates: [http://u:1, http://v:1]\n"))
	if err != nil || cfg.Origins[0].Tiers.Topology != TopologySmart || cfg.Origins[0].Tiers.ProbeSamples != 3 {
		t.Fatalf("valid origins config: %+v %v", cfg, err)
	}
}

// TestUnknownHostWithoutDefaultOrigin: with only origins configured, another host gets a 502
// that names no internals, and nothing is counted for it.
func TestUnknownHostWithoutDefaultOrigin(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "a") })
	e := newEdge(t, "", func(c *Config) { c.Origins = []OriginConfig{{Hosts: []string{"a.test"}, URL: o.URL}} })
	if r := get(t, e.URL()+"/", "Host", "b.test"); r.status != http.StatusBadGateway {
		t.Fatalf("unknown host: %d %q", r.status, r.body)
	}
	if r := get(t, e.URL()+"/", "Host", "a.test:80"); r.status != 200 || r.body != "a" {
		t.Fatalf("host with a port: %d %q", r.status, r.body)
	}
	rec := httptest.NewRecorder()
	e.serveRTT(rec, httptest.NewRequest("GET", rttPath+"?origin=nope", nil))
	if rec.Code != http.StatusNotFound {
		t.Fatalf("rtt for an unknown origin: %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	if strings.Contains(string(b), "127.0.0.1") {
		t.Fatalf("rtt error names internals: %q", b)
	}
}

// TestSmartTopologyReprobes: without anyone calling ProbeTiers, the probe loop measures the
// candidates on its interval; when the primary dies the next probe promotes the fallback and
// the third candidate becomes the fallback.
func TestSmartTopologyReprobes(t *testing.T) {
	t.Parallel()
	l := newTierLab(t)
	urls := l.upperURLs()
	lo := newEdge(t, "", func(c *Config) {
		c.Origins = []OriginConfig{{Hosts: []string{"a.test"}, URL: l.origins["a.test"].URL,
			Tiers: TierConfig{Candidates: urls, ProbeInterval: Duration(200 * time.Millisecond)}}}
	})
	waitFor := func(what string, ok func(OriginStats) bool) {
		t.Helper()
		testutil.Eventually(t, 15*time.Second, func() bool { return ok(originStats(t, lo, "a.test")) },
			"%s: %+v", what, func() any { return originStats(t, lo, "a.test") })
	}
	waitFor("first probe", func(o OriginStats) bool { return o.Primary == urls[0] && o.Secondary == urls[1] })
	l.uppers[0].Close()
	waitFor("re-probe after the primary died", func(o OriginStats) bool { return o.Primary == urls[1] && o.Secondary == urls[2] })
}
