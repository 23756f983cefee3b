package testenv

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/experiment/edge/staticsplit"
)

// TestStaticSplit: the static-split experiment's quick run on the lab's real stops. Combined,
// every page load puts its 21 requests and 216,480 body bytes on the app servers; split, the
// first load's 20 asset misses reach them once through the edge, then every load puts 1 request
// and 480 bytes on them (the lesson's 21 to 1). The two names answer with their TTLs.
func TestStaticSplit(t *testing.T) {
	testutil.RequireLab(t)
	os.Setenv("SWITCHYARD_BIN", switchyardBin(t))
	prefix := uniquePrefix()
	t.Cleanup(func() { lab.Destroy(prefix) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := staticsplit.Run(ctx, staticsplit.Params{Prefix: prefix, Pages: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.WWW.TTL != lab.WWWTTL || len(r.WWW.Answers) != 1 || r.WWW.Answers[0] != lab.L7VIP {
		t.Errorf("www.lab.test: %+v, want the L7 VIP alone with TTL %d", r.WWW, lab.WWWTTL)
	}
	if r.Static.TTL != lab.StaticTTL || len(r.Static.Answers) != 1 {
		t.Errorf("static.lab.test: %+v, want the edge with TTL %d", r.Static, lab.StaticTTL)
	}
	if r.AssetBytes != 216000 {
		t.Errorf("the page's assets are %d bytes, want the lesson's 216,000", r.AssetBytes)
	}
	for _, l := range r.Loads {
		want := staticsplit.Load{Arrangement: l.Arrangement, Page: l.Page, Requests: 21, AppRequests: 21, AppBytes: 216480}
		switch {
		case l.Arrangement == "split" && l.Page == 1:
			want.EdgeMisses = 20 // the shell and 19 assets fill the edge; the tracking query is the app's
		case l.Arrangement == "split":
			want.AppRequests, want.AppBytes, want.EdgeHits = 1, 480, 20
		}
		if l != want {
			t.Errorf("page load %+v, want %+v", l, want)
		}
	}
	if len(r.Loads) != 6 {
		t.Errorf("%d page loads, want 3 per arrangement", len(r.Loads))
	}
}
