package route

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/benchcpu"
	"github.com/switchyard/switchyard/internal/httppath"
)

// linearMatch is the original matcher, kept as the oracle: every route in order, first match
// wins, with the original host and path conditions.
func linearMatch(t *Table, r *http.Request, cleanPath string) *Route {
	host := hostOnly(r.Host)
	var query map[string][]string
	for _, rt := range t.Routes {
		if !oracleHost(rt, host) || !oraclePath(rt, cleanPath) {
			continue
		}
		if rt.methods != nil && !rt.methods[r.Method] {
			continue
		}
		if !matchConds(rt.headers, func(n string) ([]string, bool) { v, ok := r.Header[n]; return v, ok }) {
			continue
		}
		if len(rt.query) > 0 {
			if query == nil {
				query = r.URL.Query()
			}
			if !matchConds(rt.query, func(n string) ([]string, bool) { v, ok := query[n]; return v, ok }) {
				continue
			}
		}
		return rt
	}
	return nil
}

func oracleHost(rt *Route, host string) bool {
	switch {
	case rt.Host == "":
		return true
	case strings.HasPrefix(rt.Host, "*."):
		return strings.HasSuffix(host, rt.Host[1:])
	}
	return strings.EqualFold(host, rt.Host)
}

func oraclePath(rt *Route, p string) bool {
	switch {
	case rt.PathExact != "":
		return p == rt.PathExact
	case rt.PathPrefix != "":
		pre := strings.TrimSuffix(rt.PathPrefix, "/")
		return pre == "" || p == pre || strings.HasPrefix(p, pre+"/")
	case rt.pathRe != nil:
		return rt.pathRe.MatchString(p)
	}
	return true
}

var (
	hostVocab = []string{"", "", "", "example.com", "EXAMPLE.com", "a.example.com", "b.a.example.com", "*.example.com",
		"*.a.example.com", "*.com", "other.org", "*.org", "x", "*.", "k\u212a.com", "kk.com", "\u017f.com"}
	reqHosts = []string{"example.com", "Example.COM:8080", "a.example.com", "b.a.example.com", "c.b.a.example.com",
		"other.org", "x.other.org", "x", "x:80", ".example.com", "kk.com", "k\u212a.com", "KK.com.", "[::1]:80", "", "a.example.com.", "s.com", "S.com"}
	segVocab = []string{"a", "b", "api", "v1", "v2", "x", ""}
)

func randPath(rng *rand.Rand, maxSeg int) string {
	n := rng.IntN(maxSeg + 1)
	p := ""
	for i := 0; i < n; i++ {
		p += "/" + segVocab[rng.IntN(len(segVocab))]
	}
	if p == "" || rng.IntN(4) == 0 {
		p += "/"
	}
	return p
}

func randSpec(rng *rand.Rand, i int) Spec {
	s := Spec{Name: fmt.Sprint("r", i), Host: hostVocab[rng.IntN(len(hostVocab))]}
	switch rng.IntN(5) {
	case 0:
		s.PathExact = randPath(rng, 3)
	case 1, 2:
		s.PathPrefix = randPath(rng, 3)
	case 3:
		s.PathRegex = []string{"/v[0-9]+/.*", "/a.*", ".*/x", "/(a|b)/?", "/api/v[12]"}[rng.IntN(5)]
	}
	if rng.IntN(4) == 0 {
		s.Methods = [][]string{{"GET"}, {"post", "PUT"}, {"HEAD", "get"}}[rng.IntN(3)]
	}
	if rng.IntN(5) == 0 {
		s.Headers = []Cond{[]Cond{{Name: "x-v", Value: "2"}, {Name: "X-V", Present: true}, {Name: "x-v", Regex: "[13]"}}[rng.IntN(3)]}
	}
	if rng.IntN(5) == 0 {
		s.Query = []Cond{[]Cond{{Name: "beta", Present: true}, {Name: "q", Value: "1"}, {Name: "q", Regex: "[0-9]+"}}[rng.IntN(3)]}
	}
	return s
}

func randRequest(rng *rand.Rand) (*http.Request, string) {
	p := randPath(rng, 4)
	q := []string{"", "beta", "q=1", "q=22", "q=x&beta=1"}[rng.IntN(5)]
	u := &url.URL{Scheme: "http", Host: "h", Path: p, RawQuery: q}
	r := httptest.NewRequest([]string{"GET", "POST", "PUT", "HEAD", "DELETE"}[rng.IntN(5)], u.String(), nil)
	r.Host = reqHosts[rng.IntN(len(reqHosts))]
	if v := rng.IntN(4); v > 0 {
		r.Header.Set("X-V", fmt.Sprint(v))
	}
	// Mostly normalised paths, as the proxy passes; sometimes raw ones, which must agree too.
	clean := p
	if rng.IntN(8) > 0 {
		var err error
		if clean, err = httppath.Normalize(p, p); err != nil {
			clean = p
		}
	}
	return r, clean
}

// TestIndexMatchesLinearScan checks, over many random tables and requests, that the index picks
// exactly the route a first-match scan in table order picks.
func TestIndexMatchesLinearScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 1))
	tables, perTable := 400, 300
	if testing.Short() {
		tables = 50
	}
	hits := 0
	for n := 0; n < tables; n++ {
		size := 1 + rng.IntN(60)
		if n%50 == 0 {
			size = 2000
		}
		specs := make([]Spec, size)
		for i := range specs {
			specs[i] = randSpec(rng, i)
		}
		tab, err := Compile(specs)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < perTable; k++ {
			r, clean := randRequest(rng)
			want, got := linearMatch(tab, r, clean), tab.Match(r, clean)
			if want != got {
				t.Fatalf("table %d (%d routes), %s host %q path %q query %q x-v %q: index picked %s, scan picked %s",
					n, size, r.Method, r.Host, clean, r.URL.RawQuery, r.Header.Get("X-V"), name(got), name(want))
			}
			if want != nil {
				hits++
			}
		}
	}
	// The vocabularies must make matches common, or the test would prove little.
	if total := tables * perTable; hits < total/3 {
		t.Errorf("only %d of %d random requests matched a route; widen the vocabularies", hits, total)
	}
}

func name(r *Route) string {
	if r == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s (#%d %+v)", r.Name, r.Index, r.Spec)
}

// TestIndexUnusedWhenRoutesChanged checks that a table whose routes were replaced after Compile
// is still matched by its routes.
func TestIndexUnusedWhenRoutesChanged(t *testing.T) {
	tab, err := Compile([]Spec{{Name: "a", PathExact: "/a"}})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := Compile([]Spec{{Name: "b", PathExact: "/b"}, {Name: "c"}})
	tab.Routes = other.Routes
	r := httptest.NewRequest("GET", "/b", nil)
	if got := tab.Match(r, "/b"); got == nil || got.Name != "b" {
		t.Errorf("Match after Routes changed = %v, want b", got)
	}
}

// benchTable has n routes spread over 50 hosts, each with its own path prefix, exact path,
// methods or a header condition, as a large multi-tenant configuration has; the last route is
// the one the benchmark's request matches.
func benchTable(b *testing.B, n int) *Table {
	specs := make([]Spec, 0, n)
	for i := 0; i < n-1; i++ {
		s := Spec{Name: fmt.Sprint("r", i), Host: fmt.Sprintf("h%d.example.com", i%50)}
		switch i % 4 {
		case 0:
			s.PathPrefix = fmt.Sprintf("/svc%d", i)
		case 1:
			s.PathExact = fmt.Sprintf("/svc%d/item", i)
			s.Methods = []string{"GET"}
		case 2:
			s.PathPrefix = fmt.Sprintf("/api/v%d", i)
			s.Headers = []Cond{{Name: "x-tenant", Value: fmt.Sprint(i)}}
		case 3:
			s.Host = "*." + s.Host
			s.PathPrefix = fmt.Sprintf("/static%d", i)
		}
		specs = append(specs, s)
	}
	specs = append(specs, Spec{Name: "last", Host: "h7.example.com", PathPrefix: "/last", Methods: []string{"GET"}})
	tab, err := Compile(specs)
	if err != nil {
		b.Fatal(err)
	}
	return tab
}

func benchMatch(b *testing.B, n int) {
	tab := benchTable(b, n)
	hit := httptest.NewRequest("GET", "http://h7.example.com/last/a/b", nil)
	hit.Header.Set("X-Tenant", "none")
	miss := httptest.NewRequest("GET", "http://h7.example.com/nothing/here", nil)
	miss.Header.Set("X-Tenant", "none")
	b.Run("last", func(b *testing.B) {
		defer benchcpu.Start(b)()
		for i := 0; i < b.N; i++ {
			if tab.Match(hit, "/last/a/b") == nil {
				b.Fatal("no match")
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		defer benchcpu.Start(b)()
		for i := 0; i < b.N; i++ {
			if tab.Match(miss, "/nothing/here") != nil {
				b.Fatal("matched")
			}
		}
	})
}

// BenchmarkMatch10 and BenchmarkMatch10000 compare a small and a large table; their ratio is
// what the index is for (target: 10,000 routes at most 1.2x the cost of 10).
func BenchmarkMatch10(b *testing.B)    { benchMatch(b, 10) }
func BenchmarkMatch10000(b *testing.B) { benchMatch(b, 10000) }

// BenchmarkScan10000 is the linear scan over the large table, for comparison.
func BenchmarkScan10000(b *testing.B) {
	tab := benchTable(b, 10000)
	hit := httptest.NewRequest("GET", "http://h7.example.com/last/a/b", nil)
	defer benchcpu.Start(b)()
	for i := 0; i < b.N; i++ {
		if linearMatch(tab, hit, "/last/a/b") == nil {
			b.Fatal("no match")
		}
	}
}
