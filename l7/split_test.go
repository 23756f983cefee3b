package l7

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A route split 90/10 over two pools sends them exactly those shares (smooth weighted round
// robin: every run of ten requests holds nine and one), on every engine, and a weight set to
// 0 by a reload stops the pool's share at once.
func TestWeightedSplit(t *testing.T) {
	stable := startBackend(t, "stable", nil)
	canary := startBackend(t, "canary", nil)
	conf := func(e engine, w1, w2 int) string {
		return fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pools: [{pool: stable, weight: %d}, {pool: canary, weight: %d}]}]
pools:
  - {name: stable, backends: [{address: %q}]}
  - {name: canary, backends: [{address: %q}]}
`, w1, w2, e.backend(stable.addr), e.backend(canary.addr))
	}
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		p := e.start(t, conf(e, 90, 10))
		client := testClient // HTTP/1.1, TLS without verification
		if e.h2 {
			client = h2Client(p.base())
		}
		count := func(n int) map[string]int {
			got := map[string]int{}
			for range n {
				resp, err := client.Get(p.base() + "/x")
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				got[resp.Header.Get("X-Backend")]++
			}
			return got
		}
		if got := count(1000); got["stable"] != 900 || got["canary"] != 100 {
			t.Fatalf("1,000 requests split %v, want stable 900 and canary 100", got)
		}
		cfg, err := ParseConfig([]byte(conf(e, 1, 0)))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.s.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		if got := count(50); got["canary"] != 0 {
			t.Fatalf("after the canary's weight went to 0: %v", got)
		}
	})
}

// A split with split_key sends each user (header X-User) to the same pool on every request, on
// every engine, and the pools get their weights' shares of users.
func TestStickySplit(t *testing.T) {
	stable := startBackend(t, "stable", nil)
	canary := startBackend(t, "canary", nil)
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, split_key: "header:X-User", pools: [{pool: stable, weight: 80}, {pool: canary, weight: 20}]}]
pools:
  - {name: stable, backends: [{address: %q}]}
  - {name: canary, backends: [{address: %q}]}
`, e.backend(stable.addr), e.backend(canary.addr)))
		client := testClient
		if e.h2 {
			client = h2Client(p.base())
		}
		users := map[string]int{}
		for round := range 3 {
			for u := range 200 {
				req, _ := http.NewRequest("GET", p.base()+"/x", nil)
				req.Header.Set("X-User", fmt.Sprint("user-", u))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				pool := resp.Header.Get("X-Backend")
				key := fmt.Sprint(u, pool)
				if round > 0 && users[key] == 0 {
					t.Fatalf("user-%d moved to %s in round %d", u, pool, round)
				}
				users[key]++
			}
		}
		canaryUsers := 0
		for u := range 200 {
			if users[fmt.Sprint(u, "canary")] > 0 {
				canaryUsers++
			}
		}
		if canaryUsers < 20 || canaryUsers > 60 {
			t.Errorf("%d of 200 users on the canary, want about 40", canaryUsers)
		}
	})
}

// A split's weights are checked: a total of 0, a negative weight, an unknown pool and both
// pool and pools are refused, naming the field.
func TestWeightedSplitConfigErrors(t *testing.T) {
	for _, c := range []struct{ routes, want string }{
		{"[{name: r, pools: [{pool: a, weight: 0}]}]", "routes[0].pools: route \"r\": the weights add up to 0"},
		{"[{name: r, pools: [{pool: a, weight: -1}]}]", "routes[0].pools[0].weight: -1 is negative"},
		{"[{name: r, pools: [{pool: nope, weight: 1}]}]", "routes[0].pools[0].pool: route \"r\" splits to unknown pool \"nope\""},
		{"[{name: r, pool: a, pools: [{pool: a, weight: 1}]}]", "routes[0].pools: route \"r\" sets both pool and pools"},
		{"[{name: r, pool: a, split_key: client}]", "routes[0].split_key: route \"r\" has no split to make sticky"},
		{"[{name: r, split_key: path, pools: [{pool: a, weight: 1}]}]", "routes[0].split_key: unknown \"path\"; use client, header:NAME or cookie:NAME"},
		{"[{name: r, split_key: \"header:\", pools: [{pool: a, weight: 1}]}]", "routes[0].split_key: unknown"},
	} {
		_, err := ParseConfig([]byte("listeners: [{address: \"127.0.0.1:0\"}]\nroutes: " + c.routes + "\npools: [{name: a, backends: [{address: \"127.0.0.1:1\"}]}]\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.routes, err, c.want)
		}
	}
}
