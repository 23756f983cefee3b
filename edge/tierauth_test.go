package edge

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// testTierToken is the tiers.token newEdge gives every test edge.
const testTierToken = "test-tier-token"

// TestClientTierMarkerIgnored: a client that sends X-Switchyard-Tier itself (the plain "1" lower
// tiers used to send, or a wrong token) is served as a client: its miss goes through the tier
// chain, the marker never reaches a tier or the origin, and it is not counted as a lower tier's.
func TestClientTierMarkerIgnored(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "o")
	})
	other := newEdge(t, o.URL, nil)
	up := newEdge(t, o.URL, func(c *Config) { c.Tiers.Upper = []string{other.URL()} })
	for i, forged := range []string{"1", "test-tier-tokeN", testTierToken + "x"} {
		r := get(t, fmt.Sprintf("%s/forged%d", up.URL(), i), TierHeader, forged)
		if r.status != 200 || other.Stats().Misses.Load() != int64(i+1) {
			t.Fatalf("marker %q: status %d, the tier saw %d misses: a client skipped the tier chain", forged, r.status, other.Stats().Misses.Load())
		}
		if v := o.last().Header.Get(TierHeader); v != "" {
			t.Fatalf("marker %q: the origin got %s: %q", forged, TierHeader, v)
		}
		// A hit on the fast path is not counted as a lower tier's either.
		get(t, fmt.Sprintf("%s/forged%d", up.URL(), i), TierHeader, forged)
	}
	for _, st := range up.OriginStats() {
		if st.Upper.Requests != 0 {
			t.Fatalf("forged markers counted as lower-tier requests: %+v", st)
		}
	}
	// The lower tier's real marker is its token: other saw up's misses with it and counted them.
	var upper int64
	for _, st := range other.OriginStats() {
		upper += st.Upper.Requests
	}
	if upper != 3 {
		t.Fatalf("the tier counted %d lower-tier requests, want 3", upper)
	}
}

// TestNoTierTokenHonoursNoMarker: an edge without tiers.token treats every marker as a client's.
func TestNoTierTokenHonoursNoMarker(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "o")
	})
	other := newEdge(t, o.URL, func(c *Config) { c.Tiers.Token = "" })
	up := newEdge(t, o.URL, func(c *Config) { c.Tiers = TierConfig{Upper: []string{other.URL()}} })
	if r := get(t, up.URL()+"/x", TierHeader, "1"); r.status != 200 || other.Stats().Misses.Load() != 1 {
		t.Fatalf("status %d, tier misses %d", r.status, other.Stats().Misses.Load())
	}
	for _, st := range other.OriginStats() {
		if st.Upper.Requests != 0 {
			t.Fatalf("an edge without tiers.token honoured a marker: %+v", st)
		}
	}
}

func TestTierTokenOnlyTopLevel(t *testing.T) {
	t.Parallel()
	_, err := ParseConfig([]byte("origins:\n  - hosts: [a.test]\n    url: http://a:1\n    tiers:\n      token: x\n"))
	if err == nil || !strings.Contains(err.Error(), "top-level tiers.token") {
		t.Fatalf("per-origin token: %v", err)
	}
}
