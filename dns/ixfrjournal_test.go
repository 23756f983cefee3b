package dns

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
)

// TestIXFRJournalSurvivesRestart restarts a primary after a change: the first IXFR from the old
// serial is still incremental (the journal file in the state directory). A zone file edited
// while the server was down does not match the journal's last serial: the journal is not used
// and the IXFR is answered with the full zone.
func TestIXFRJournalSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	notify := fmt.Sprintf("127.0.0.1:%d", secondaryPorts.free(t)) // nobody listens: NOTIFYs go unanswered
	start := func(serial int) (*Server, func()) {
		if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(xfrZoneText(serial)), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse([]byte("state_dir: state\n" + xfrYAML(notify)))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listen, cfg.Dir = "127.0.0.1:0", dir
		srv, err := NewServer(cfg, Options{Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return srv, startBuilt(t, srv)
	}
	srv, stop := start(1)
	if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(xfrZoneText(2)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := srv.ReloadWith(func() (*config.Config, error) { return srv.Config(), nil }); err != nil {
		t.Fatal(err)
	}
	stop()
	if _, err := os.Stat(filepath.Join(dir, "state", "example.com.ixfr")); err != nil {
		t.Fatalf("no IXFR journal file: %v", err)
	}

	srv, stop = start(2)
	rrs, _ := transferIn(t, srv.Addr().String(), 1)
	if len(rrs) < 4 || rrs[0].(*mdns.SOA).Serial != 2 || rrs[1].(*mdns.SOA).Serial != 1 {
		t.Fatalf("IXFR from 1 after a restart: not incremental (%d records)", len(rrs))
	}
	if !hasRecord(rrs, "old.example.com. 300 IN A 192.0.2.7") || !hasRecord(rrs, `new.example.com. 300 IN TXT "serial 2"`) {
		t.Errorf("IXFR from 1 after a restart does not carry the change: %v", rrs)
	}
	if n := counterValue(srv.ops.transfers.WithLabelValues("example.com.", "IXFR", "ok")); n != 1 {
		t.Errorf("IXFR ok = %v, want 1", n)
	}
	stop()

	srv, _ = start(3) // edited while down: the journal ends at 2, the zone is at 3
	if rrs, _ := transferIn(t, srv.Addr().String(), 1); len(rrs) != xfrFiller+14 {
		t.Errorf("IXFR from 1 after an edit while down: %d records, want the full zone (%d)", len(rrs), xfrFiller+14)
	}
}
