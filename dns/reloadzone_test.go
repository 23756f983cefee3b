package dns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/dnssec"
)

// reloadPorts are the one-zone reload tests' loopback ports.
var reloadPorts = &portRange{first: 47100, last: 47139}

// writeFiles writes name -> text into dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// startReloadTest starts a server of yml with its files in dir, listening on a port of reloadPorts.
func startReloadTest(t *testing.T, dir, yml string) *Server {
	t.Helper()
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("parse config: %v\n%s", err, yml)
	}
	cfg.Listen, cfg.Dir = fmt.Sprintf("127.0.0.1:%d", reloadPorts.free(t)), dir
	return startConfig(t, cfg, Options{Logger: testLogger(t)})
}

// A reload of one zone serves its file's new data and leaves every other zone the same object,
// its file not even read (an edit there is not served); the zone's secondary, a switchyard
// secondary, gets the NOTIFY and takes the change by IXFR (the journal gained the step). A
// second reload of the unchanged file changes nothing.
func TestReloadZoneAlone(t *testing.T) {
	dir := t.TempDir()
	primPort, secPort := reloadPorts.free(t), reloadPorts.free(t)
	primAddr, secAddr := fmt.Sprintf("127.0.0.1:%d", primPort), fmt.Sprintf("127.0.0.1:%d", secPort)
	writeFiles(t, dir, map[string]string{"zone": xfrZoneText(1), "a.zone": keepZoneText("a.test.", 1, ""),
		"c.zone": keepZoneText("c.test.", 1, "")})
	yml := xfrYAML(secAddr) + "  - origin: a.test.\n    file: a.zone\n  - origin: c.test.\n    file: c.zone\n"
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen, cfg.Dir = primAddr, dir
	primary := startConfig(t, cfg, Options{Logger: testLogger(t)})
	sec, _ := startSecondary(t, t.TempDir(), secPort, secondaryYAML(primAddr, ""))
	waitSerial(t, secAddr, 1, "after AXFR")
	before := zonesByOrigin(primary)

	writeFiles(t, dir, map[string]string{"zone": xfrZoneText(2), "a.zone": keepZoneText("a.test.", 2, "edited IN A 192.0.2.9\n")})
	r, err := primary.ReloadZone("EXAMPLE.com") // any case, no final dot
	if err != nil {
		t.Fatal(err)
	}
	if want := (ZoneReload{Zone: "example.com.", OldSerial: 1, Serial: 2, Changed: true}); r != want {
		t.Errorf("ReloadZone = %+v, want %+v", r, want)
	}
	after := zonesByOrigin(primary)
	for _, o := range []string{"a.test.", "c.test."} {
		if after[o] != before[o] {
			t.Errorf("zone %s was replaced by the reload of example.com.", o)
		}
	}
	if after["example.com."] == before["example.com."] {
		t.Fatal("example.com. was not replaced")
	}
	if got := answer(t, primary, "www.example.com.", mdns.TypeA); !strings.Contains(got, "192.0.2.2") {
		t.Errorf("www.example.com. A after the reload: %q, want 192.0.2.2", got)
	}
	if m := q(t, primary, "edited.a.test.", mdns.TypeA, QueryOptions{}); m.Rcode != mdns.RcodeNameError {
		t.Errorf("edited.a.test.: rcode %s, want NXDOMAIN: a.test.'s file was read", mdns.RcodeToString[m.Rcode])
	}
	waitSerial(t, secAddr, 2, "after the one-zone reload's NOTIFY")
	if n := transfersIn(sec, "IXFR"); n != 1 {
		t.Errorf("IXFR transfers in = %v, want 1 (the reload's step in the journal)", n)
	}
	if err := sameAnswers(primAddr, secAddr); err != nil {
		t.Error(err)
	}

	r, err = primary.ReloadZone("example.com.")
	if want := (ZoneReload{Zone: "example.com.", OldSerial: 2, Serial: 2}); err != nil || r != want {
		t.Errorf("reload of the unchanged file: %+v, %v; want %+v", r, err, want)
	}
	if zonesByOrigin(primary)["example.com."] != after["example.com."] {
		t.Error("a reload of the unchanged file replaced the zone")
	}
}

// Each bad request is refused with the reason and the fix, and the old zone keeps serving, the
// same object: a name that is no zone, a secondary zone, a zone without a file, a zone file with
// a syntax error (named with its line), one of another origin, a missing file.
func TestReloadZoneBadInput(t *testing.T) {
	dir := t.TempDir()
	good := keepZoneText("a.test.", 1, "")
	writeFiles(t, dir, map[string]string{"a.zone": good})
	srv := startReloadTest(t, dir, fmt.Sprintf(`state_dir: state
zones:
  - origin: a.test.
    file: a.zone
  - origin: rec.test.
    records: ["www A 192.0.2.1"]
  - origin: sec.test.
    secondary: {primaries: ["127.0.0.1:%d"]}
`, reloadPorts.free(t)))
	path := filepath.Join(dir, "a.zone")
	old := zonesByOrigin(srv)["a.test."]
	for _, c := range []struct {
		what, zone, file string
		is               error
		want             []string
	}{
		{"unknown zone", "nosuch.test.", "", ErrUnknownZone, []string{"no such zone", "reload the configuration"}},
		{"secondary zone", "sec.test.", "", ErrNotReloadable, []string{"secondary zone", "NOTIFY"}},
		{"no zone file", "rec.test.", "", ErrNotReloadable, []string{"records are in the configuration", "reload the configuration"}},
		{"syntax error", "a.test.", good + "bad IN A 300.1.2.3\n", nil,
			[]string{path, "line: 7", "300.1.2.3", "correct the zone file " + path + " and reload the zone again"}},
		{"another origin", "a.test.", keepZoneText("b.test.", 2, ""), nil,
			[]string{path, "the SOA is for b.test., not the zone's origin a.test."}},
		{"missing file", "a.test.", "-", nil, []string{path, "no such file"}},
	} {
		switch c.file {
		case "":
		case "-":
			os.Remove(path)
		default:
			writeFiles(t, dir, map[string]string{"a.zone": c.file})
		}
		_, err := srv.ReloadZone(c.zone)
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) {
			t.Errorf("%s: error %v, want %v", c.what, err, c.is)
			continue
		}
		for _, w := range append(c.want, "the old zone keeps serving") {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.what, err, w)
			}
		}
		if zonesByOrigin(srv)["a.test."] != old {
			t.Errorf("%s: a.test. replaced", c.what)
		}
		if got := answer(t, srv, "www.a.test.", mdns.TypeA); !strings.Contains(got, "192.0.2.2") {
			t.Errorf("%s: www.a.test. A = %q, want the old zone's 192.0.2.2", c.what, got)
		}
	}
	if n := counterValue(srv.metrics.reloads.WithLabelValues("error")); n != 6 {
		t.Errorf("reloads error = %v, want 6", n)
	}
	writeFiles(t, dir, map[string]string{"a.zone": keepZoneText("a.test.", 2, "new IN A 192.0.2.8\n")})
	if r, err := srv.ReloadZone("a.test."); err != nil || !r.Changed || r.Serial != 2 {
		t.Fatalf("reload of the fixed file: %+v, %v", r, err)
	}
	if got := answer(t, srv, "new.a.test.", mdns.TypeA); !strings.Contains(got, "192.0.2.8") {
		t.Errorf("new.a.test. A after the fix: %q", got)
	}
}

// A one-zone reload of a signed, updatable zone does what a full reload does: the update
// journal is replayed over the edited file (its updates kept), and the zone is signed with the
// keys now in its key file, which BIND's validator checks against the new key.
func TestReloadZoneSignedAndUpdated(t *testing.T) {
	dir := t.TempDir()
	k1, err := dnssec.Generate("example.", dnssec.FlagsKSK, 3600)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "example.key")
	writeFiles(t, dir, map[string]string{"example.key": string(k1.File(time.Now())), "example.zone": updZone})
	// NOTIFYs go to a free port of the range: nothing answers; this test does not look at them.
	srv := startReloadTest(t, dir, updYAML(0, keyFile, fmt.Sprintf("127.0.0.1:%d", reloadPorts.free(t))))
	other := zonesByOrigin(srv)["other.test."]
	if out, ok := nsupdate(t, srv, "hmac-sha256:upd-key:"+updSecret, false, "update add upd.example. 60 A 192.0.2.50"); !ok {
		t.Fatalf("nsupdate failed:\n%s", out)
	}

	// The file gains a record at the same serial (the journal starts there), the key is new.
	k2, err := dnssec.Generate("example.", dnssec.FlagsKSK, 3600)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"example.key": string(k2.File(time.Now())),
		"example.zone": updZone + "file2 IN A 192.0.2.60\n"})
	r, err := srv.ReloadZone("example.")
	if err != nil {
		t.Fatal(err)
	}
	if want := (ZoneReload{Zone: "example.", OldSerial: 2, Serial: 2, Changed: true}); r != want {
		t.Errorf("ReloadZone = %+v, want %+v (the update replayed over the file)", r, want)
	}
	if zonesByOrigin(srv)["other.test."] != other {
		t.Error("other.test. was replaced")
	}
	anchor := anchorFile(t, k2)
	for name, want := range map[string]string{"upd.example.": "192.0.2.50", "file2.example.": "192.0.2.60"} {
		if out := delv(t, srv, anchor, name, "A"); !strings.Contains(out, "fully validated") || !strings.Contains(out, want) {
			t.Errorf("delv %s A with the new key: want %s, fully validated; got\n%s", name, want, out)
		}
	}
}
