package edgelab

import (
	"context"
	"testing"
)

func TestPropagationQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the three modes, about 4 s of timed rounds")
	}
	p := QuickParams()
	rows, err := RunPropagationModes(context.Background(), p, true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]PropagationResult{}
	for _, r := range rows {
		t.Logf("%+v", r)
		got[r.Mode] = r
	}
	common, unique, e := int64(p.Common), int64(p.Unique), int64(p.Edges)
	pull, push, hybrid := got["pull"], got["push"], got["hybrid"]
	// Pull: every object once per requesting edge, plus the shell's TTL refetches (3 per edge).
	if pull.Pushed != 0 || pull.OriginRequests < unique+common*e || pull.OriginRequests > unique+common*e+4*e {
		t.Errorf("pull: %+v", pull)
	}
	// Stale rounds match the lesson's model at these parameters within 20%: a real refetch lands
	// when the request after the wall-clock expiry arrives, which on a loaded machine (3.3 ms
	// rounds) can be several rounds after the model's.
	if want := ModelStaleRounds(p); pull.StaleRounds < want*4/5 || pull.StaleRounds > want*6/5 {
		t.Errorf("pull stale rounds %d, model %d", pull.StaleRounds, want)
	}
	if push.OriginRequests != 0 || push.Pushed != (common+unique)*e || push.Wasted != unique*(e-1) || push.StaleRounds != 0 || push.UniqueHits != unique {
		t.Errorf("push: %+v", push)
	}
	if hybrid.OriginRequests != unique || hybrid.Pushed != common*e || hybrid.Wasted != 0 || hybrid.StaleRounds != 0 {
		t.Errorf("hybrid: %+v", hybrid)
	}
}
