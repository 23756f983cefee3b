package experiment

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

func TestEdgeExperimentsQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("quick edge experiments take about 15 s")
	}
	for _, c := range []struct {
		name string
		want []string
	}{
		{"edge-burst", []string{"QUICK RUN", "burst | policy  | ceiling", "   10 | lru     |", "   10 | tinylfu |", "    5 |", "    2 |", "0.8998"}},
		{"propagation", []string{"QUICK RUN", "pull   | measured", "push   | model", "hybrid | lesson", "11.85"}},
	} {
		e, err := Get(c.name)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := e.Run(context.Background(), &out, Options{Quick: true}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, s := range c.want {
			if !strings.Contains(out.String(), s) {
				t.Errorf("%s output lacks %q:\n%s", c.name, s, out.String())
			}
		}
		t.Log(out.String())
	}
}

// TestEdgeExperimentsFull runs both edge experiments at the lessons' full size (about five minutes
// on two cores). It runs only with SWITCHYARD_EDGE_FULL=1, until `switchyard lab experiment run`
// is wired to this registry.
func TestEdgeExperimentsFull(t *testing.T) {
	if os.Getenv("SWITCHYARD_EDGE_FULL") == "" {
		t.Skip("set SWITCHYARD_EDGE_FULL=1 to run the full-size edge experiments")
	}
	for _, name := range []string{"edge-burst", "propagation"} {
		e, err := Get(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Run(context.Background(), os.Stdout, Options{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
