package loader_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
)

// TestRefusesOldLayout: maps pinned by a binary of layout v1 (a common LRU list, per-index
// counters) are refused with a message naming the fix, never reused or misread, and nothing is
// pinned beside them.
func TestRefusesOldLayout(t *testing.T) {
	testutil.RequireRoot(t)
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/layout-old-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pin) })
	if err := loader.EnsureBPFFS(pin); err != nil {
		t.Skip(err)
	}
	if err := os.MkdirAll(filepath.Join(pin, "maps-v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := loader.LoadForwarder(loader.Options{PinDir: pin, RingSize: testRing, MaxVIPs: 4, MaxBackends: 16, ConnTableSize: 1024})
	if err == nil || !strings.Contains(err.Error(), "holds maps of layout v1, this binary uses v3") || !strings.Contains(err.Error(), "lb detach") {
		t.Fatalf("load over v1 pins: %v, want a refusal naming the layouts and `lb detach`", err)
	}
	if _, err := os.Stat(loader.MapsDir(pin)); !os.IsNotExist(err) {
		t.Fatalf("%s was created beside the old pins (%v)", loader.MapsDir(pin), err)
	}
}
