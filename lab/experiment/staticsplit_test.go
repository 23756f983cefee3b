package experiment

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// TestStaticSplitRegistered: `lab experiment run static-split` exists, needs root, and without
// root says so (the run itself is asserted by testenv's TestStaticSplit).
func TestStaticSplitRegistered(t *testing.T) {
	e, err := Get("static-split")
	if err != nil {
		t.Fatal(err)
	}
	if !e.NeedsRoot || e.Stop != "edge" {
		t.Errorf("static-split: %+v, want an edge experiment that needs root", e)
	}
	if os.Geteuid() == 0 {
		return
	}
	var out bytes.Buffer
	if err := e.Run(context.Background(), &out, Options{Quick: true}); err == nil || !strings.Contains(err.Error(), "root") {
		t.Errorf("static-split without root: %v, want an error that names root", err)
	}
}
