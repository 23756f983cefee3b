package edgelab

import (
	"context"
	"testing"
)

// TestTieredQuick runs the four scenarios in short mode and checks the seed's claims: with the
// smart topology every lower edge chooses the same upper tier per origin, each origin is reached
// from that one upper tier only, and when it dies the fallback (the second best) takes over
// before any request goes to the origin directly.
func TestTieredQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 9 edges and 36 delay relays per scenario")
	}
	p := TieredQuickParams()
	got := map[string]TieredResult{}
	for _, s := range TieredScenarios {
		r, err := RunTiered(context.Background(), p, s)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", r)
		if r.Errors != 0 || r.Requests != 6*p.PerLower {
			t.Fatalf("%s: %d of %d requests failed", s, r.Errors, r.Requests)
		}
		got[s] = r
	}
	none, generic, smart, fb := got["none"], got["generic"], got["smart"], got["fallback"]
	total := func(r TieredResult) int64 { return r.OriginRequests[0] + r.OriginRequests[1] }
	if total(smart) >= total(none) || total(generic) >= total(none) {
		t.Errorf("origin requests: none %d, generic %d, smart %d; tiering should cut them", total(none), total(generic), total(smart))
	}
	if len(none.ReachedFrom[0]) != 1 || none.ReachedFrom[0]["direct"] == 0 {
		t.Errorf("no tiering: shop reached from %v, want direct only", none.ReachedFrom[0])
	}
	if len(generic.ReachedFrom[0]) < 2 {
		t.Errorf("generic: shop reached from %v, want several upper tiers", generic.ReachedFrom[0])
	}
	distinct := map[[2]int]bool{}
	for i := range 6 {
		for _, rq := range tieredTrace(i, p) {
			distinct[rq] = true
		}
	}
	if total(smart) != int64(len(distinct)) {
		t.Errorf("smart: %d origin requests, want one per distinct object (%d)", total(smart), len(distinct))
	}
	want := [2]string{"U1", "U3"}
	for o := range TieredOrigins {
		if !smart.AllAgree || smart.Primary[o] != want[o] || smart.Secondary[o] != "U2" {
			t.Errorf("smart: %s primary %s secondary %s (all agree %v), want %s and U2", TieredOrigins[o], smart.Primary[o], smart.Secondary[o], smart.AllAgree, want[o])
		}
		if from := smart.ReachedFrom[o]; len(from) != 1 || from[want[o]] != smart.OriginRequests[o] {
			t.Errorf("smart: %s reached from %v, want %s only", TieredOrigins[o], from, want[o])
		}
	}
	if smart.P95 >= none.P95 {
		t.Logf("smart p95 %v not below no tiering's %v (a loaded machine can do this)", smart.P95, none.P95)
	}
	if from := fb.ReachedFrom[0]; from["U1"] == 0 || from["U2"] == 0 || from["direct"] != 0 || fb.Fallbacks == 0 {
		t.Errorf("fallback: shop reached from %v with %d fallbacks; want U1 then U2, never direct", from, fb.Fallbacks)
	}
	if fb.PrimaryAfter != "U2" || fb.SecondaryAfter != "U3" {
		t.Errorf("after the re-probe the shop's tiers are %s, %s; want U2, U3", fb.PrimaryAfter, fb.SecondaryAfter)
	}
}
