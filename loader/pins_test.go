package loader_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
	"github.com/switchyard/switchyard/maps"
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

// TestVIPCacheFreshAfterLoad: a program loaded over pinned maps uses no VIP a CPU cached
// (vip_cache) before the load: an older binary, which knows no cache, may have changed vips in
// between. Here the VIP is deleted through the map itself, without the version bump maps.Set
// makes, as such a binary would. Pinned to one CPU, so every packet meets the same CPU's cache.
func TestVIPCacheFreshAfterLoad(t *testing.T) {
	testutil.RequireRoot(t)
	pinThread(t, firstCPU(t))
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/vipcache-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pin) })
	if err := loader.EnsureBPFFS(pin); err != nil {
		t.Skip(err)
	}
	opts := loader.Options{PinDir: pin, RingSize: testRing, MaxVIPs: 8, MaxBackends: 64, ConnTableSize: 4096}
	dp := newDataplaneOpts(t, opts)
	dp.vip(0, vip4, 80, maps.TCP, 0, be4[0])
	syn := pkt{src: cli4, dst: vip4, sport: 1000, dport: 80, proto: "tcp", flags: "S"}.build(t)
	if v, _ := dp.run(syn); v != xdpTX {
		t.Fatalf("SYN to the VIP: verdict %s, want TX", verdictName[v])
	}
	var k bpfobj.LBVipKey
	var m bpfobj.LBVipMeta
	for it := dp.f.Objs.Vips.Iterate(); it.Next(&k, &m); {
		if err := dp.f.Objs.Vips.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	again := newDataplaneOpts(t, opts)
	if v, _ := again.run(syn); v != xdpPass {
		t.Fatalf("SYN to the VIP deleted before the load: verdict %s, want PASS", verdictName[v])
	}
}
