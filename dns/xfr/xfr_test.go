package xfr

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/internal/wire"
	"github.com/switchyard/switchyard/dns/update"
	"github.com/switchyard/switchyard/dns/zone"
)

// The journal keeps at most `journal` steps, follows RFC 1982 serial arithmetic, and is dropped
// when the content changes without a serial change or the serial goes backwards.
func TestJournalBoundAndSerialRules(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(serial uint32, recs ...string) *Zone { return testXfrZone(t, 2, serial, recs...) }
	prev := mk(1, "a.example.com. 300 IN A 192.0.2.1")
	for serial := uint32(2); serial <= 4; serial++ {
		next := mk(serial, fmt.Sprintf("a.example.com. 300 IN A 192.0.2.%d", serial))
		if !next.carryJournal(prev, log) {
			t.Fatalf("serial %d: change not reported", serial)
		}
		prev = next
	}
	if len(prev.diffs) != 2 || prev.diffs[0].from.Serial != 2 {
		t.Fatalf("journal of %d steps from %d, want 2 from serial 2", len(prev.diffs), prev.diffs[0].from.Serial)
	}
	for since, want := range map[uint32]string{1: "IXFR-as-AXFR", 2: "IXFR", 3: "IXFR", 4: "IXFR-uptodate", 5: "IXFR-uptodate"} {
		if _, kind := prev.records(true, since); kind != want {
			t.Errorf("IXFR from %d: %s, want %s", since, kind, want)
		}
	}
	rrs, _ := prev.records(true, 2)
	if len(rrs) != 1+2*4+1 { // SOA, 2 x (old SOA, deleted, new SOA, added), SOA
		t.Errorf("IXFR from 2: %d records: %v", len(rrs), rrs)
	}
	same := mk(4, "a.example.com. 300 IN A 192.0.2.99")
	if same.carryJournal(prev, log) || len(same.diffs) != 0 {
		t.Error("a content change without a serial change kept the journal (it no longer describes the zone)")
	}
	unchanged := mk(4, "a.example.com. 300 IN A 192.0.2.4")
	if unchanged.carryJournal(prev, log) || len(unchanged.diffs) != 2 {
		t.Error("an unchanged zone lost its journal or was reported changed")
	}
	back := mk(3, "a.example.com. 300 IN A 192.0.2.3")
	if !back.carryJournal(prev, log) || len(back.diffs) != 0 {
		t.Error("a serial going backwards kept the journal")
	}
	if !wire.SerialLess(0xFFFFFFFF, 1) || wire.SerialLess(1, 0xFFFFFFFF) {
		t.Error("serial arithmetic does not wrap (RFC 1982)")
	}
}

// The journal never holds more records than the zone (at least journalMinRecords): a step that
// rewrites the zone is dropped, and an IXFR across it is a full transfer.
func TestJournalMemoryBound(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	mk := func(serial uint32, base int, extra ...string) *Zone {
		var recs []string
		for i := range 200 {
			if i > 0 || len(extra) == 0 {
				recs = append(recs, fmt.Sprintf("h%d.example.com. 300 IN A 10.0.%d.%d", i, base, i))
			}
		}
		return testXfrZone(t, 100, serial, append(recs, extra...)...)
	}
	prev := mk(1, 1)
	small := mk(2, 1, "h0.example.com. 300 IN A 10.9.9.9")
	small.carryJournal(prev, log)
	if len(small.diffs) != 1 {
		t.Fatalf("a one-record change: %d steps, want 1", len(small.diffs))
	}
	rewrite := mk(3, 2) // every record changes: 400 journal records for a 200-record zone
	rewrite.carryJournal(small, log)
	if len(rewrite.diffs) != 0 {
		t.Fatalf("journal kept %d steps holding more records than the zone", len(rewrite.diffs))
	}
	if _, kind := rewrite.records(true, 2); kind != "IXFR-as-AXFR" {
		t.Fatalf("IXFR across the rewrite: %s, want a full transfer", kind)
	}
}

// testXfrZone builds example.com. at serial from recs and returns its transfer data.
func testXfrZone(t *testing.T, journal int, serial uint32, recs ...string) *Zone {
	t.Helper()
	c := &config.Config{Zones: []config.Zone{{Origin: "example.com.", Records: recs,
		SOA: &config.SOA{NS: "ns1", Mbox: "h", Serial: serial}}}}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := zone.Build(c, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	z := s.Find("example.com.")
	return &Zone{origin: z.Origin, zone: z, soa: z.SOA, journal: journal, size: z.RecordsLen()}
}

// The history file gains one entry per step (appended, not rewritten) until it holds twice the
// steps the zone keeps; then it is rewritten with the kept ones. After every step a restart's
// load finds the same steps as memory holds.
func TestJournalFileAppendsThenCompacts(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	path := filepath.Join(t.TempDir(), "ixfr")
	mk := func(serial uint32) *Zone {
		x := testXfrZone(t, 3, serial, fmt.Sprintf("a.example.com. 300 IN A 192.0.2.%d", serial))
		x.journalPath = path
		return x
	}
	prev := mk(1)
	prev.saveJournal(log) // no steps yet: no file
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("a zone without steps wrote its history: %v", err)
	}
	wantEntries := []int{1, 2, 3, 4, 5, 6, 3, 4, 5, 6, 3}
	for i, want := range wantEntries {
		serial := uint32(i + 2)
		next := mk(serial)
		next.file, next.fileSteps = prev.file, prev.fileSteps
		if !next.carryJournal(prev, log) {
			t.Fatalf("serial %d: change not reported", serial)
		}
		before, _ := os.Stat(path)
		next.saveJournal(log)
		cs, _, err := update.Read(path)
		if err != nil || len(cs) != want {
			t.Fatalf("serial %d: the file holds %d entries (%v), want %d", serial, len(cs), err, want)
		}
		after, _ := os.Stat(path)
		rewritten := i == 0 || want == 3 && i > 2 // the first step, and each compaction
		if appended := before != nil && os.SameFile(before, after); appended == rewritten {
			t.Errorf("serial %d: appended %v with %d entries", serial, appended, want)
		}
		restarted := mk(serial)
		if got := restarted.loadJournal(log); len(got) != len(next.diffs) || got[0].from.Serial != next.diffs[0].from.Serial {
			t.Fatalf("serial %d: a restart loads %d steps, memory holds %d", serial, len(got), len(next.diffs))
		}
		prev = next
	}
}
