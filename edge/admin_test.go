package edge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/edge/relay"
	"github.com/switchyard/switchyard/internal/testutil"
)

const testToken = "s3cret"

func adminConfig(c *Config) {
	c.Admin = AdminConfig{Listen: "127.0.0.1:0", Token: testToken}
}

func admin(t *testing.T, e *Edge, method, path string, body any, token string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+e.AdminAddr()+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func TestPurgeByURLPrefixTagSoft(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Etag", `"1"`)
		switch {
		case strings.HasPrefix(r.URL.Path, "/shipment/"):
			w.Header().Set("Surrogate-Key", "shipments "+strings.TrimPrefix(r.URL.Path, "/shipment/"))
		case r.URL.Path == "/page":
			w.Header().Set("Cache-Tag", "pages, home")
		}
		fmt.Fprint(w, r.URL.Path)
	})
	e := newEdge(t, o.URL, adminConfig)
	host := "Host"
	site := "www.example.com"
	paths := []string{"/static/a.css", "/static/b.js", "/shipment/1", "/shipment/2", "/page", "/other"}
	for _, p := range paths {
		get(t, e.URL()+p, host, site)
	}
	if code, _ := admin(t, e, "POST", "/purge", PurgeRequest{URLs: []string{"http://www.example.com/other"}}, ""); code != 401 {
		t.Fatalf("purge without a token: %d, want 401", code)
	}
	if code, _ := admin(t, e, "POST", "/purge", PurgeRequest{URLs: []string{"http://www.example.com/other"}}, "wrong"); code != 401 {
		t.Fatalf("purge with a wrong token: %d, want 401", code)
	}
	purge := func(p PurgeRequest, want int) {
		t.Helper()
		code, b := admin(t, e, "POST", "/purge", p, testToken)
		var res PurgeResult
		json.Unmarshal(b, &res)
		if code != 200 || res.Purged != want {
			t.Fatalf("purge %+v: %d %s, want %d purged", p, code, b, want)
		}
	}
	purge(PurgeRequest{URLs: []string{"http://www.example.com/other"}}, 1)
	purge(PurgeRequest{Prefixes: []string{"http://www.example.com/static/"}}, 2)
	purge(PurgeRequest{Tags: []string{"shipments"}}, 2)
	purge(PurgeRequest{Tags: []string{"home"}, Soft: true}, 1)
	for _, p := range []string{"/other", "/static/a.css", "/shipment/2"} {
		expect(t, get(t, e.URL()+p, host, site), 200, Miss, p)
	}
	// Soft purge: kept, but validated before it is served again.
	expect(t, get(t, e.URL()+"/page", host, site), 200, Miss, "/page")
	if code, _ := admin(t, e, "POST", "/purge", PurgeRequest{URLs: []string{"not a url"}}, testToken); code != 400 {
		t.Fatalf("bad URL: %d, want 400", code)
	}
}

func TestSoftPurgeServesStaleOnError(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(500)
			return
		}
		w.Header().Set("Cache-Control", "max-age=600, stale-if-error=600")
		fmt.Fprint(w, "kept")
	})
	e := newEdge(t, o.URL, adminConfig)
	get(t, e.URL()+"/k", "Host", "www.example.com")
	if _, err := e.Purge(PurgeRequest{URLs: []string{"http://www.example.com/k"}, Soft: true}); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	expect(t, get(t, e.URL()+"/k", "Host", "www.example.com"), 200, Stale, "kept")
}

func TestPushPrewarms(t *testing.T) {
	t.Parallel()
	var prefetched atomic.Int32
	var version atomic.Int32
	version.Store(1)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(PrefetchHeader) != "" {
			prefetched.Add(1)
		}
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprintf(w, "v%d", version.Load())
	})
	edges := []*Edge{newEdge(t, o.URL, adminConfig), newEdge(t, o.URL, adminConfig)}
	urls := []string{"http://www.example.com/app.js", "http://www.example.com/style.css"}
	for _, e := range edges {
		code, b := admin(t, e, "POST", "/push", PushRequest{URLs: urls}, testToken)
		var res []PushResult
		json.Unmarshal(b, &res)
		if code != 200 || len(res) != 2 || res[0].Cache != Miss || res[0].Status != 200 {
			t.Fatalf("push: %d %s", code, b)
		}
	}
	if prefetched.Load() != 4 {
		t.Fatalf("origin saw %d prefetches, want 4", prefetched.Load())
	}
	for _, e := range edges {
		expect(t, get(t, e.URL()+"/app.js", "Host", "www.example.com"), 200, Hit, "v1")
	}
	// Pushing again is free while fresh; with refresh the update reaches every edge at once.
	edges[0].Push(PushRequest{URLs: urls})
	if prefetched.Load() != 4 {
		t.Fatalf("a push of fresh objects went to the origin")
	}
	version.Store(2)
	for _, e := range edges {
		e.Push(PushRequest{URLs: urls, Refresh: true})
		expect(t, get(t, e.URL()+"/app.js", "Host", "www.example.com"), 200, Hit, "v2")
	}
}

func TestStatsAndMetrics(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprint(w, "m")
	})
	e := newEdge(t, o.URL, adminConfig)
	get(t, e.URL()+"/m")
	get(t, e.URL()+"/m")
	code, b := admin(t, e, "GET", "/stats", nil, testToken)
	var rep StatsReport
	if err := json.Unmarshal(b, &rep); err != nil || code != 200 {
		t.Fatalf("stats: %d %s", code, b)
	}
	if rep.Counters["hits"] != 1 || rep.Counters["misses"] != 1 || rep.Counters["hit_ratio"] != 0.5 || rep.Objects != 1 {
		t.Fatalf("stats: %+v", rep)
	}
	if code, _ := admin(t, e, "GET", "/stats", nil, ""); code != 401 {
		t.Fatalf("stats without token: %d", code)
	}
	_, m := admin(t, e, "GET", "/metrics", nil, "")
	for _, name := range []string{"switchyard_edge_hits_total 1", "switchyard_edge_misses_total 1",
		"switchyard_edge_hit_ratio 0.5", "switchyard_edge_origin_bytes_total 1", "switchyard_edge_collapsed_requests_total",
		"switchyard_edge_stale_served_total", "switchyard_edge_revalidations_total", `switchyard_edge_evictions_total{tier="memory"}`} {
		if !strings.Contains(string(m), name) {
			t.Errorf("metrics lack %q", name)
		}
	}
}

func TestMemoryEviction(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprint(w, strings.Repeat("e", 10<<10))
	})
	e := newEdge(t, o.URL, func(c *Config) { c.Memory.MaxBytes = 100 << 10 })
	for i := 0; i < 100; i++ {
		get(t, fmt.Sprintf("%s/e%d", e.URL(), i))
	}
	testutil.Eventually(t, 2*time.Second, func() bool { return e.Stats().MemoryEvictions.Load() > 0 },
		"1 MB through a 100 KB memory tier evicted nothing")
	if m, _ := e.store.Bytes(); m > 100<<10 {
		t.Fatalf("memory tier holds %d bytes over its 100 KiB budget", m)
	}
}

// TestSmartTieredCache: two upper tiers, one 5 ms and one 60 ms (round trip) from the origin;
// the lower edge picks the near one, fetches misses through it, and falls back to the far one
// (the second best) when it fails.
func TestSmartTieredCache(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprint(w, "tiered")
	})
	originAddr := strings.TrimPrefix(o.URL, "http://")
	near, err := relay.Start("127.0.0.1:0", originAddr, 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer near.Close()
	far, err := relay.Start("127.0.0.1:0", originAddr, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer far.Close()
	tierNear := newEdge(t, "http://"+near.Addr(), nil)
	tierFar := newEdge(t, "http://"+far.Addr(), nil)
	lower := newEdge(t, o.URL, func(c *Config) {
		c.Tiers.Candidates = []string{tierFar.URL(), tierNear.URL()}
		c.Tiers.ProbeInterval = Duration(time.Hour) // the test drives probes itself
	})
	lower.ProbeTiers()
	st := lower.Tiers()
	if len(st) != 2 || !st[1].Selected || st[0].Selected || st[1].ScoreMS >= st[0].ScoreMS {
		t.Fatalf("tier selection: %+v", st)
	}
	expect(t, get(t, lower.URL()+"/t"), 200, Miss, "tiered")
	if tierNear.Stats().Misses.Load() != 1 || tierFar.Stats().Misses.Load() != 0 {
		t.Fatalf("miss did not go through the near tier: near %d far %d", tierNear.Stats().Misses.Load(), tierFar.Stats().Misses.Load())
	}
	// The near tier dies: the next miss goes to the fallback, the far tier.
	tierNear.Close()
	expect(t, get(t, lower.URL()+"/t2"), 200, Miss, "tiered")
	if tierFar.Stats().Misses.Load() != 1 || lower.Stats().TierFallbacks.Load() != 1 {
		t.Fatalf("tier fallbacks = %d, want 1", lower.Stats().TierFallbacks.Load())
	}
	lower.ProbeTiers()
	if st := lower.Tiers(); !st[0].Selected || st[1].ScoreMS != -1 {
		t.Fatalf("after the near tier died: %+v", st)
	}
}

func TestConfigErrorsNameLineAndField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ yaml, want string }{
		{"origin: http://127.0.0.1:1\nbogus: 1\n", "line 2: bogus: unknown field"},
		{"listen: nope\norigin: http://127.0.0.1:1\n", "line 1: field listen"},
		{"origin: ftp://x\n", "line 1: field origin"},
		{"listen: 127.0.0.1:0\n", "field origin: missing"},
		{"origin: http://a:1\nadmin:\n  listen: 127.0.0.1:0\n", "line 2: field admin.token: missing"},
		{"origin: http://a:1\nmemory:\n  max_bytes: lots\n", "line 3"},
		{"origin: http://a:1\ngrace: soon\n", "line 2"},
	} {
		t.Run(c.yaml, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q: error %v, want it to contain %q", c.yaml, err, c.want)
			}
		})
	}
	cfg, err := ParseConfig([]byte("origin: http://127.0.0.1:1\nmemory:\n  max_bytes: 64MiB\ndisk:\n  dir: /tmp/x\n  max_bytes: 2GiB\ngrace: 10s\n"))
	if err != nil || cfg.Memory.MaxBytes != 64<<20 || cfg.Disk.MaxBytes != 2<<30 || time.Duration(cfg.Grace) != 10*time.Second {
		t.Fatalf("valid config: %+v %v", cfg, err)
	}
}

// The admin API reads the Bearer scheme case-insensitively (RFC 9110 11.1), through the one
// implementation the L7's admin uses (internal/adminauth).
func TestAdminBearerSchemeAnyCase(t *testing.T) {
	t.Parallel()
	e := newEdge(t, "http://127.0.0.1:1", adminConfig)
	for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
		req, _ := http.NewRequest("GET", "http://"+e.AdminAddr()+"/stats", nil)
		req.Header.Set("Authorization", scheme+" "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Authorization: %s <token>: %d, want 200", scheme, resp.StatusCode)
		}
	}
}
