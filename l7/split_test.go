package l7

import (
	"fmt"
	"io"
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

// A split's weights are checked: a total of 0, a negative weight, an unknown pool and both
// pool and pools are refused, naming the field.
func TestWeightedSplitConfigErrors(t *testing.T) {
	for _, c := range []struct{ routes, want string }{
		{"[{name: r, pools: [{pool: a, weight: 0}]}]", "routes[0].pools: route \"r\": the weights add up to 0"},
		{"[{name: r, pools: [{pool: a, weight: -1}]}]", "routes[0].pools[0].weight: -1 is negative"},
		{"[{name: r, pools: [{pool: nope, weight: 1}]}]", "routes[0].pools[0].pool: route \"r\" splits to unknown pool \"nope\""},
		{"[{name: r, pool: a, pools: [{pool: a, weight: 1}]}]", "routes[0].pools: route \"r\" sets both pool and pools"},
	} {
		_, err := ParseConfig([]byte("listeners: [{address: \"127.0.0.1:0\"}]\nroutes: " + c.routes + "\npools: [{name: a, backends: [{address: \"127.0.0.1:1\"}]}]\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.routes, err, c.want)
		}
	}
}
