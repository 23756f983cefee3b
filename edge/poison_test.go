package edge

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// vulnerableOrigin builds its body from any request field, as an application that trusts
// forwarding and override fields does; every response is cacheable for everyone.
func vulnerableOrigin(t *testing.T) *testOrigin {
	return newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		for name, vv := range r.Header {
			for _, v := range vv {
				if strings.Contains(strings.ToLower(v), "evil") {
					fmt.Fprintf(w, "poisoned by %s: %s", name, v)
					return
				}
			}
		}
		if v := r.Header.Get("X-Tenant"); v != "" {
			fmt.Fprintf(w, "tenant %s", v)
			return
		}
		fmt.Fprint(w, "clean")
	})
}

// TestPoisoningHeadersDoNotReachTheOrigin plays the attacker with each field that overrides a
// request's host, scheme, path or method: a poisoned request on a miss, then a clean request,
// which must not get a poisoned body. The edge sets X-Forwarded-Host and -Proto itself.
func TestPoisoningHeadersDoNotReachTheOrigin(t *testing.T) {
	t.Parallel()
	o := vulnerableOrigin(t)
	e := newEdge(t, o.URL, nil)
	attacks := map[string]string{
		"X-Forwarded-Host":       "evil.example",
		"X-Forwarded-Scheme":     "evil",
		"X-Forwarded-Proto":      "evil",
		"X-Forwarded-Server":     "evil.example",
		"X-Original-URL":         "/evil",
		"X-Rewrite-URL":          "/evil",
		"X-Host":                 "evil.example",
		"Forwarded":              "host=evil.example;proto=https",
		"X-HTTP-Method-Override": "EVIL",
	}
	for name, value := range attacks {
		path := "/page/" + name
		poisoned := get(t, e.URL()+path, name, value)
		if poisoned.status != 200 || poisoned.body != "clean" {
			t.Errorf("%s: the attacker's request reached the origin with the field: %q", name, poisoned.body)
		}
		settle(t, e)
		clean := get(t, e.URL()+path)
		if clean.body != "clean" {
			t.Errorf("%s: a clean request got %q", name, clean.body)
		}
		if n := o.hits(path); n != 1 {
			t.Errorf("%s: origin saw %d requests, want 1 (the attacker's miss)", name, n)
		}
	}
	r := get(t, e.URL()+"/xff", "X-Forwarded-For", "6.6.6.6", "Host", "www.example.com")
	seen := o.last().Header
	if got := seen.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "6.6.6.6, 127.0.0.1" {
		t.Errorf("X-Forwarded-For at the origin %q, want one line ending with the peer", got)
	}
	if seen.Get("X-Forwarded-Host") != "www.example.com" || seen.Get("X-Forwarded-Proto") != "http" ||
		seen.Get("Via") != viaValue {
		t.Errorf("forwarding fields at the origin: host %q proto %q via %q", seen.Get("X-Forwarded-Host"),
			seen.Get("X-Forwarded-Proto"), seen.Get("Via"))
	}
	if r.status != 200 {
		t.Fatalf("xff request: %d", r.status)
	}
}

// TestRequestHeadersForwardAndKey: request_headers.forward lets a field through as the client
// sent it; request_headers.key makes each value its own entry (also on the fast path), and a URL
// purge removes every keyed entry.
func TestRequestHeadersForwardAndKey(t *testing.T) {
	t.Parallel()
	o := vulnerableOrigin(t)
	e := newEdge(t, o.URL, func(c *Config) {
		c.RequestHeaders.Forward = []string{"x-forwarded-host"}
		c.RequestHeaders.Key = []string{"X-Tenant"}
		c.Admin.Listen, c.Admin.Token = "127.0.0.1:0", "t"
	})
	get(t, e.URL()+"/fwd", "X-Forwarded-Host", "cdn.example")
	if got := o.last().Header.Get("X-Forwarded-Host"); got != "cdn.example" {
		t.Errorf("forwarded X-Forwarded-Host %q, want the client's", got)
	}
	for _, c := range []struct{ tenant, cache, body string }{
		{"a", Miss, "tenant a"}, {"b", Miss, "tenant b"}, {"a", Hit, "tenant a"}, {"b", Hit, "tenant b"}, {"", Miss, "clean"},
	} {
		t.Run(c.tenant, func(t *testing.T) {
			var r result
			if c.tenant == "" {
				r = get(t, e.URL()+"/keyed")
			} else {
				r = get(t, e.URL()+"/keyed", "X-Tenant", c.tenant)
			}
			expect(t, r, 200, c.cache, c.body)
			settle(t, e)
		})
	}
	// A new connection, so the fast path answers (it must key the same way).
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", e.URL()+"/keyed", nil)
	req.Header.Set("X-Tenant", "b")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Cache") != Hit || e.Stats().FastPath.Load() == 0 {
		t.Errorf("fast path: %s, fast hits %d", resp.Header.Get("X-Cache"), e.Stats().FastPath.Load())
	}
	res, err := e.Purge(PurgeRequest{URLs: []string{"http://" + e.Addr() + "/keyed"}})
	if err != nil || res.Purged != 3 {
		t.Fatalf("purge: %+v %v, want 3 keyed entries", res, err)
	}
	expect(t, get(t, e.URL()+"/keyed", "X-Tenant", "a"), 200, Miss, "tenant a")
}

func TestRequestHeadersConfigErrors(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"origin: http://a:1\nrequest_headers:\n  forward: [\"X Bad\"]\n", "line 3: field request_headers.forward: entry 1"},
		{"origin: http://a:1\nrequest_headers:\n  key: [X-Ok, Connection]\n", "line 3: field request_headers.key: entry 2: Connection"},
		{"origin: http://a:1\nrequest_headers:\n  keys: [X-Ok]\n", "line 3"},
		{"origin: http://a:1\ntargeted_cache_control: [cache-control]\n", "line 2: field targeted_cache_control"},
		{"origin: http://a:1\nmax_connections: -1\n", "line 2: field max_connections"},
	} {
		t.Run(c.yaml, func(t *testing.T) {
			_, err := ParseConfig([]byte(c.yaml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q: error %v, want it to contain %q", c.yaml, err, c.want)
			}
		})
	}
	cfg, err := ParseConfig([]byte("origin: http://a:1\nrequest_headers:\n  forward: [forwarded]\n  key: [x-tenant]\ntargeted_cache_control: [switchyard-cache-control, cdn-cache-control]\n"))
	if err != nil || cfg.RequestHeaders.Forward[0] != "Forwarded" || cfg.RequestHeaders.Key[0] != "X-Tenant" ||
		cfg.TargetedCacheControl[1] != "Cdn-Cache-Control" {
		t.Fatalf("valid config: %+v %v", cfg.RulesConfig, err)
	}
}

// TestAdminLoopbackAndToken: an admin address without a host binds loopback, a non-loopback one
// without a token is refused with the reason, and a wrong token of any length gets 401.
func TestAdminLoopbackAndToken(t *testing.T) {
	t.Parallel()
	_, err := ParseConfig([]byte("origin: http://a:1\nadmin:\n  listen: 0.0.0.0:9091\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2: field admin.token: missing while admin.listen 0.0.0.0:9091 is not a loopback address") {
		t.Fatalf("non-loopback admin without a token: %v", err)
	}
	o := vulnerableOrigin(t)
	e := newEdge(t, o.URL, func(c *Config) { c.Admin.Listen, c.Admin.Token = ":0", "s3cret" })
	if !strings.HasPrefix(e.AdminAddr(), "127.0.0.1:") {
		t.Fatalf("admin listens on %s, want loopback", e.AdminAddr())
	}
	for _, tok := range []string{"", "s", "s3creT", "s3cret-and-more"} {
		r := get(t, "http://"+e.AdminAddr()+"/stats", "Authorization", "Bearer "+tok)
		if r.status != http.StatusUnauthorized {
			t.Errorf("token %q: %d, want 401", tok, r.status)
		}
	}
	if r := get(t, "http://"+e.AdminAddr()+"/stats", "Authorization", "Bearer s3cret"); r.status != 200 {
		t.Errorf("right token: %d", r.status)
	}
}
