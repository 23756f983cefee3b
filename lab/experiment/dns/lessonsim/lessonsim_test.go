package lessonsim_test

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/lab/experiment"
	"github.com/switchyard/switchyard/lab/experiment/dns/lessonsim"
)

func TestRequestsMatchTheLesson(t *testing.T) {
	r := lessonsim.Requests()
	sum := 0
	for _, n := range r {
		sum += n
	}
	// The lesson prints "largest resolver's share %23.35": 120 of 514.
	if sum != 514 || r[0] != 120 {
		t.Fatalf("requests sum %d, largest %d; want 514 and 120", sum, r[0])
	}
}

// The geolocation policy is a deterministic function of the client group, so the real server
// must reproduce the lesson's row exactly; this also proves the resolvers' groups reach the
// server both through ECS and through the source address.
func TestGeolocationReproducesTheLesson(t *testing.T) {
	if testing.Short() {
		t.Skip("replays an hour of model time through the server (~2 s)")
	}
	r, err := lessonsim.Run(context.Background(), lessonsim.Spec{Policy: "geolocation", TTL: 300, Duration: 3600})
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 0.0005 }
	if !near(r.Share["b34"], 0.576) || !near(r.Share["b35"], 0.253) || !near(r.Deviation, 0.076) ||
		!near(r.UnitDistance, 1.710) || r.UpstreamQueries != 480 || r.ScopeErrors != 0 {
		t.Fatalf("got %+v, want the lesson's 57.6/25.3/17.1, 0.076, 1.710, 480", r)
	}
}

func TestFailoverWindowFollowsTTL(t *testing.T) {
	r, err := lessonsim.Run(context.Background(), lessonsim.Spec{Policy: "geolocation", TTL: 30, Duration: 300, OutageStart: 100})
	if err != nil {
		t.Fatal(err)
	}
	// Lesson: ttl 30 -> window 39 s, 6666 dropped requests; detection 10 s after the outage.
	if r.Window != 39 || r.Dropped != 6666 || r.DetectedAt != 110 {
		t.Fatalf("window %d dropped %d detected %d; want 39, 6666, 110", r.Window, r.Dropped, r.DetectedAt)
	}
}

func TestExperimentsQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs both DNS experiments in quick mode (~10 s)")
	}
	for _, name := range []string{"dns-policy", "dns-failover"} {
		e, err := experiment.Get(name)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := e.Run(context.Background(), &out, experiment.Options{Quick: true}); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out.String())
		}
		for _, want := range []string{"QUICK MODE", "lesson", "Differences from the lesson"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s output lacks %q:\n%s", name, want, out.String())
			}
		}
		t.Logf("%s\n%s", name, out.String())
	}
}
