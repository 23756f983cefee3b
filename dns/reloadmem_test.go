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
	writeBigZone(t, zf, "big.test.", 1, records)
	srv, load, base, loaded := measuredServer(t, dir, "listen: 127.0.0.1:0\nzones:\n  - origin: big.test.\n    file: big.zone\n")
	// A new serial: the zone changed, so the reload rebuilds it (an unchanged one is carried).
	writeBigZone(t, zf, "big.test.", 2, records)
	var took time.Duration
	peak := peakDuring(t, func() {
		start := time.Now()
		if err := srv.ReloadWith(load); err != nil {
			t.Fatal(err)
		}
		took = time.Since(start)
	})
	after := rssBytes(t) // no GC or FreeOSMemory here: what the server itself left
	zoneMem := loaded - base
	t.Logf("%d records: zone %d MiB resident, reload peak %d MiB (%.2fx; %.2fx above the loaded zone), after reload %d MiB (%.2fx), reload %s",
		records, zoneMem>>20, (peak-base)>>20, float64(peak-base)/float64(zoneMem), float64(peak-loaded)/float64(zoneMem),
		(after-base)>>20, float64(after-base)/float64(zoneMem), took.Round(time.Millisecond))
	// The packed zone (~100 bytes per A record resident, ~540 as parsed records before) and a
	// build that streams into it: the reload needs about the new zone once more (its staging
	// and the parse's garbage) on top of the old and the new zones.
	if per := zoneMem / int64(records); per > 250 {
		t.Errorf("the zone holds %d bytes per record resident, want under 250", per)
	}
	if peak-loaded > zoneMem*3/2+8<<20 {
		t.Errorf("the reload needed %d MiB on top of the %d MiB loaded, want under 1.5x the zone", (peak-loaded)>>20, zoneMem>>20)
	}
	if after-base > zoneMem*13/10+16<<20 {
		t.Fatalf("after the reload the process keeps %d MiB for a zone that loads in %d MiB", (after-base)>>20, zoneMem>>20)
	}
	runtime.KeepAlive(srv)
}

// writeBigZone writes a zone file of records A records for origin.
func writeBigZone(t *testing.T, path, origin string, serial, records int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "$ORIGIN %s\n$TTL 300\n@ IN SOA ns1 host %d 3600 600 604800 60\n@ IN NS ns1\nns1 IN A 192.0.2.1\n", origin, serial)
	for i := 0; i < records; i++ {
		fmt.Fprintf(w, "h%d IN A 10.%d.%d.%d\n", i, i>>16&255, i>>8&255, i&255)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// measuredServer writes yml as dir/dns.yaml and starts a server on it, returning the server,
// the loader a reload uses, and the resident set before and after the zones were built.
func measuredServer(t *testing.T, dir, yml string) (srv *Server, load func() (*config.Config, error), base, loaded int64) {
	t.Helper()
	cfgFile := filepath.Join(dir, "dns.yaml")
	if err := os.WriteFile(cfgFile, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	load = func() (*config.Config, error) { return config.Load(cfgFile) }
	cfg, err := load()
	if err != nil {
		t.Fatal(err)
	}
	debug.FreeOSMemory()
	base = rssBytes(t)
	if srv, err = NewServer(cfg, Options{}); err != nil {
		t.Fatal(err)
	}
	debug.FreeOSMemory()
	return srv, load, base, rssBytes(t)
}

// peakDuring samples the resident set while f runs and returns the highest value seen.
func peakDuring(t *testing.T, f func()) int64 {
	var peak int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if r := rssBytes(t); r > peak {
				peak = r
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	<-done
	return peak
}

// A reload of a server with many zones where one changed rebuilds that zone alone: it needs
// the memory of that zone on top of what is loaded, not a second copy of every zone (the
// peak was old + new of all zones, about 2x, before).
func TestReloadPeakManyZones(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 8 zones of 50k records")
	}
	if raceEnabled {
		t.Skip("the race detector's shadow memory is not returned to the kernel: run without -race")
	}
	const zones, records = 8, 50000
	dir := t.TempDir()
	var yml strings.Builder
	yml.WriteString("listen: 127.0.0.1:0\nzones:\n")
	for i := range zones {
		origin := fmt.Sprintf("z%d.test.", i)
		writeBigZone(t, filepath.Join(dir, fmt.Sprintf("z%d.zone", i)), origin, 1, records)
		fmt.Fprintf(&yml, "  - origin: %s\n    file: z%d.zone\n", origin, i)
	}
	srv, load, base, loaded := measuredServer(t, dir, yml.String())
	writeBigZone(t, filepath.Join(dir, "z3.zone"), "z3.test.", 2, records)
	peak := peakDuring(t, func() {
		if err := srv.ReloadWith(load); err != nil {
			t.Fatal(err)
		}
	})
	all := loaded - base
	t.Logf("%d zones of %d records: %d MiB resident, reload of one changed zone peaks %d MiB above that (%.2fx of all zones, one zone is %.2fx)",
		zones, records, all>>20, (peak-loaded)>>20, float64(peak-loaded)/float64(all), 1.0/zones)
	if z := srv.state.Load().store.Find("z3.test."); z.SOA.Serial != 2 {
		t.Fatalf("z3.test. serial %d after the reload, want 2", z.SOA.Serial)
	}
	// One zone is 1/8 of the total; building it costs about 1.2 zones. Half of all zones
	// leaves room for the sampling and the runtime, and fails a rebuild of every zone.
	if peak-loaded > all/2 {
		t.Fatalf("a reload that changed one of %d zones needed %d MiB more than the %d MiB loaded", zones, (peak-loaded)>>20, all>>20)
	}
	runtime.KeepAlive(srv)
}
