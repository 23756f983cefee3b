package minicdn

import (
	"context"
	"testing"
)

// TestRunQuick runs the scenario at test size and checks the claims the report makes.
func TestRunQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the mini-CDN scenario (a few thousand loopback requests)")
	}
	r, err := Run(context.Background(), QuickParams())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", r)
	ch, rr := r.Consistent, r.RoundRobin
	// Consistent hashing: each file is fetched by one edge, so the origin sees each distinct file
	// once; round robin spreads a file over all three edges and fetches it up to three times.
	if ch.OriginRequests != int64(r.Distinct) || rr.OriginRequests < ch.OriginRequests*3/2 {
		t.Errorf("origin requests: consistent %d, round robin %d, distinct files %d", ch.OriginRequests, rr.OriginRequests, r.Distinct)
	}
	if ch.HitRatio < 0.7 || ch.HitRatio <= rr.HitRatio || ch.Hit.N+ch.Miss.N+ch.Other != r.Params.Requests {
		t.Errorf("hit ratio: consistent %.3f, round robin %.3f", ch.HitRatio, rr.HitRatio)
	}
	// A miss waits for the origin (OriginDelay); a hit does not.
	if ch.Miss.P50 < r.Params.OriginDelay || ch.Hit.P50 >= ch.Miss.P50 {
		t.Errorf("latency: hit p50 %v, miss p50 %v, origin delay %v", ch.Hit.P50, ch.Miss.P50, r.Params.OriginDelay)
	}
	s := r.Shed
	if s.Shed == 0 || s.Marked != s.Shed || s.OK == 0 || s.Other != 0 || s.OK+s.Shed != s.Requests {
		t.Errorf("load shed: %+v (want some shed, every shed 503 with X-Load-Shed: 1 and Retry-After)", s)
	}
	d := r.Death
	if d.GETErrors != 0 || d.Failovers == 0 || d.POSTFailovers != 0 || d.POSTErrors == 0 {
		t.Errorf("edge death: %+v (want GETs failed over without errors, POSTs never retried)", d)
	}
	// Only the dead edge's share moves: about a third of the files are refetched, not all.
	if d.Moved <= 0 || d.Moved > int64(r.Distinct)/2 || d.AfterHitRatio < 0.9 {
		t.Errorf("after the death: %d cached files moved (failovers %d) of %d, hit ratio %.3f", d.Moved, d.Failovers, r.Params.Files, d.AfterHitRatio)
	}
}
