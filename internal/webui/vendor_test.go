package webui

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVendoredUPlot: the embedded uPlot files are the ones vendor/VERSION records (version,
// licence and sha256, as vendor.sh wrote them), and the licence is there.
func TestVendoredUPlot(t *testing.T) {
	b, err := os.ReadFile("vendor/VERSION")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if !strings.HasPrefix(lines[0], "uplot 1.") || !strings.Contains(lines[0], "MIT") {
		t.Errorf("vendor/VERSION names no uplot version and licence: %q", lines[0])
	}
	seen := map[string]bool{}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 2 {
			t.Fatalf("vendor/VERSION line %q: want SHA256 FILE", l)
		}
		body, err := os.ReadFile(filepath.Join("vendor", f[1]))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != f[0] {
			t.Errorf("vendor/%s differs from the sha256 vendor/VERSION records: run internal/webui/vendor.sh", f[1])
		}
		seen[f[1]] = true
		if embedded, err := files.ReadFile("vendor/" + f[1]); err == nil && string(embedded) != string(body) {
			t.Errorf("the embedded vendor/%s is not the file on disk", f[1])
		}
	}
	for _, f := range []string{"uPlot.iife.min.js", "uPlot.min.css", "LICENSE"} {
		if !seen[f] {
			t.Errorf("vendor/VERSION does not record %s", f)
		}
	}
}
