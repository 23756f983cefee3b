package edge

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestPushObjectForwardedToPeers: an object pushed to an upper tier reaches its lower tiers
// (admin.push_to) and theirs, each authenticated with the next edge's token, and each serves it
// as a hit without asking the origin; a loop between peers stops at the edge that has it, and a
// peer that refuses the token is reported without failing the push.
func TestPushObjectForwardedToPeers(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprint(w, "from origin")
	})
	withAdmin := func(token string, peers ...PushPeer) func(*Config) {
		return func(c *Config) {
			c.Admin = AdminConfig{Listen: "127.0.0.1:0", Token: token, PushTo: peers}
		}
	}
	leaf := newEdge(t, o.URL, withAdmin("leaf-token"))
	lowerB := newEdge(t, o.URL, withAdmin("b-token", PushPeer{Admin: leaf.AdminAddr(), Token: "leaf-token"}))
	lowerC := newEdge(t, o.URL, withAdmin("c-token"))
	locked := newEdge(t, o.URL, withAdmin("locked-token"))
	upper := newEdge(t, o.URL, withAdmin("upper-token",
		PushPeer{Admin: lowerB.AdminAddr(), Token: "b-token"},
		PushPeer{Admin: lowerC.AdminAddr(), Token: "c-token"},
		PushPeer{Admin: locked.AdminAddr(), Token: "not-its-token"}))
	// C also names the upper tier as a peer: the push comes back there and stops.
	lowerC.SetPushPeers([]PushPeer{{Admin: upper.AdminAddr(), Token: "upper-token"}})

	const u = "http://www.example.com/app.js"
	h := http.Header{"Cache-Control": {"max-age=600"}, "Content-Type": {"text/javascript"}}
	res, err := AdminClient{Base: upper.AdminAddr(), Token: "upper-token"}.PushObject(context.Background(), u, 200, h, []byte("v1()"))
	if err != nil || res.Cache != "PUSHED" {
		t.Fatalf("push to the upper tier: %+v %v", res, err)
	}
	byPeer := map[string]PushResult{}
	for _, f := range res.Forwarded {
		byPeer[f.Peer] = f
	}
	if len(res.Forwarded) != 3 || byPeer[lowerB.AdminAddr()].Cache != "PUSHED" || byPeer[lowerC.AdminAddr()].Cache != "PUSHED" {
		t.Fatalf("forwards: %+v", res.Forwarded)
	}
	if f := byPeer[lowerB.AdminAddr()].Forwarded; len(f) != 1 || f[0].Cache != "PUSHED" || f[0].Peer != leaf.AdminAddr() {
		t.Fatalf("B's forward to its lower tier: %+v", f)
	}
	if f := byPeer[lowerC.AdminAddr()].Forwarded; len(f) != 1 || f[0].Cache != "ALREADY" {
		t.Fatalf("C's forward back to the upper tier should stop there: %+v", f)
	}
	if e := byPeer[locked.AdminAddr()].Error; !strings.Contains(e, "unauthorized") {
		t.Fatalf("a wrong token at a peer: %q, want unauthorized", e)
	}
	for name, e := range map[string]*Edge{"upper": upper, "B": lowerB, "C": lowerC, "leaf": leaf} {
		expect(t, get(t, e.URL()+"/app.js", "Host", "www.example.com"), 200, Hit, "v1()")
		if e.Stats().Pushed.Load() != 1 {
			t.Errorf("%s stored %d pushes, want 1", name, e.Stats().Pushed.Load())
		}
	}
	if o.hits("/app.js") != 0 {
		t.Fatalf("origin asked %d times for a pushed object", o.hits("/app.js"))
	}
	if locked.store.Len() != 0 {
		t.Fatal("an edge that refused the token stored the object")
	}
	if upper.Stats().PushForwardErrors.Load() != 1 || upper.Stats().PushForwarded.Load() != 2 {
		t.Fatalf("upper forwarded %d, failed %d; want 2 and 1", upper.Stats().PushForwarded.Load(), upper.Stats().PushForwardErrors.Load())
	}
}

// TestPushPeersConfig: a push_to entry needs an address and a token, and the admin API.
func TestPushPeersConfig(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"origin: http://o\nadmin: {listen: 127.0.0.1:0, token: t, push_to: [{token: x}]}\n", "admin.push_to.1.admin: missing"},
		{"origin: http://o\nadmin: {listen: 127.0.0.1:0, token: t, push_to: [{admin: 10.0.0.2:9091}]}\n", "admin.push_to.1.token: missing"},
		{"origin: http://o\nadmin: {push_to: [{admin: 10.0.0.2:9091, token: x}]}\n", "without admin.listen"},
	} {
		if _, err := ParseConfig([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.yaml, err, c.want)
		}
	}
	cfg, err := ParseConfig([]byte("origin: http://o\nadmin: {listen: 127.0.0.1:0, token: t, push_to: [{admin: 10.0.0.2:9091, token: x}]}\n"))
	if err != nil || len(cfg.Admin.PushTo) != 1 {
		t.Fatalf("valid push_to: %+v %v", cfg.Admin.PushTo, err)
	}
}
