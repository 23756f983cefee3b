package experiment

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestMiniCDNQuick runs `lab experiment run mini-cdn --quick` and checks the report's rows; the
// claims themselves are asserted in lab/experiment/edge/minicdn.
func TestMiniCDNQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the mini-CDN scenario")
	}
	e, err := Get("mini-cdn")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := e.Run(context.Background(), &out, Options{Quick: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"QUICK RUN", "consistent  |", "round robin |", "load shed: budget 8", "X-Load-Shed: 1", "edge death", "0 errors", "0 carried X-Edge-Failover", "ring dropped it"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("output lacks %q:\n%s", s, out.String())
		}
	}
	t.Log(out.String())
}
