package dns

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/dns/config"
)

// rssBytes is the process's resident set from /proc/self/statm.
func rssBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skipf("no /proc/self/statm: %v", err)
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

// A reload of a large zone gives its memory back: the resident set after the reload stays near
// the one after the first load, instead of keeping the peak of old + new zones (2.2x before).
// The test logs the figures; with SWITCHYARD_DNS_RELOAD_RECORDS it runs a larger zone.
func TestReloadReleasesMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 200k-record zone")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory is not returned to the kernel: run without -race")
	}
	records := 200000
	if v := os.Getenv("SWITCHYARD_DNS_RELOAD_RECORDS"); v != "" {
		records, _ = strconv.Atoi(v)
	}
	dir := t.TempDir()
	zf := filepath.Join(dir, "big.zone")
	f, err := os.Create(zf)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "$ORIGIN big.test.\n$TTL 300\n@ IN SOA ns1 host 1 3600 600 604800 60\n@ IN NS ns1\nns1 IN A 192.0.2.1\n")
	for i := 0; i < records; i++ {
		fmt.Fprintf(w, "h%d IN A 10.%d.%d.%d\n", i, i>>16&255, i>>8&255, i&255)
	}
	w.Flush()
	f.Close()
	cfgFile := filepath.Join(dir, "dns.yaml")
	os.WriteFile(cfgFile, []byte("listen: 127.0.0.1:0\nzones:\n  - origin: big.test.\n    file: big.zone\n"), 0o644)
	load := func() (*config.Config, error) { return config.Load(cfgFile) }
	cfg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	debug.FreeOSMemory()
	base := rssBytes(t)
	srv, err := NewServer(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	debug.FreeOSMemory()
	loaded := rssBytes(t)
	var peak int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // sample the resident set during the reload
		defer close(done)
		for {
			if r := rssBytes(t); r > peak {
				peak = r
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	if err := srv.ReloadWith(load); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	after := rssBytes(t) // no GC or FreeOSMemory here: what the server itself left
	close(stop)
	<-done
	zoneMem := loaded - base
	t.Logf("%d records: zone %d MiB resident, reload peak %d MiB (%.2fx), after reload %d MiB (%.2fx), reload %s",
		records, zoneMem>>20, (peak-base)>>20, float64(peak-base)/float64(zoneMem),
		(after-base)>>20, float64(after-base)/float64(zoneMem), took.Round(time.Millisecond))
	if after-base > zoneMem*13/10+16<<20 {
		t.Fatalf("after the reload the process keeps %d MiB for a zone that loads in %d MiB", (after-base)>>20, zoneMem>>20)
	}
	runtime.KeepAlive(srv)
}
