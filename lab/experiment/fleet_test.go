package experiment

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestFleetRegistered: `lab experiment run fleet` exists, needs root, and without root says so
// instead of half-building a lab (the run itself is asserted by testenv's TestFleet).
func TestFleetRegistered(t *testing.T) {
	e, err := Get("fleet")
	if err != nil {
		t.Fatal(err)
	}
	if !e.NeedsRoot || e.Stop != "l4" {
		t.Errorf("fleet: %+v, want an l4 experiment that needs root", e)
	}
	if os.Geteuid() == 0 {
		return
	}
	var out bytes.Buffer
	if err := e.Run(context.Background(), &out, Options{Quick: true}); err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("fleet without root: %v, want an error that names root", err)
	}
}
