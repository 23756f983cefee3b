package experiment

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestExperimentTieredCacheQuick runs tiered-cache in short mode and checks the claims it
// prints: under smart every lower edge picks the same upper tier per origin and each origin is
// reached from that one tier only; the killed primary's origin goes to the fallback, never direct.
func TestExperimentTieredCacheQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("tiered-cache quick takes about 20 s")
	}
	out := runQuick(t, "tiered-cache")
	for _, s := range []string{
		"QUICK RUN",
		"smart: shop.example primary U1, secondary U2 (every lower edge chose the same: true); reached from 1 upper tier(s)",
		"smart: media.example primary U3, secondary U2 (every lower edge chose the same: true); reached from 1 upper tier(s)",
		"after the re-probe shop's primary is U2, secondary U3",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("tiered-cache output lacks %q", s)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  shop reached from") && strings.Contains(line, "direct:") {
			t.Errorf("fallback went direct while the second-best tier was up: %s", line)
		}
		if strings.HasPrefix(line, "none ") && !strings.Contains(line, "direct:") {
			t.Errorf("no tiering reached the origins through a tier: %s", line)
		}
	}
}

// TestExperimentEdgeBytes checks the lesson's counts: 6 requests at the edge, 2 misses, 2 at the
// origin from the edge (3 with the direct one), 480-byte bodies, wire above body.
func TestExperimentEdgeBytes(t *testing.T) {
	out := runQuick(t, "edge-bytes")
	for _, s := range []string{
		"edge counter   = requests 6, hits 4, misses 2, origin requests 2, origin bytes 960",
		"origin counter = requests 3",
		"edge TR900011 r1   MISS     480",
		"edge TR900012 r3   HIT      480",
		"wire/body on a hit = ",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("edge-bytes output lacks %q", s)
		}
	}
}

func runQuick(t *testing.T, name string) string {
	t.Helper()
	e, err := Get(name)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := e.Run(context.Background(), &out, Options{Quick: true}); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out.String())
	}
	t.Log(out.String())
	return out.String()
}
