package dns

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// secondaryYAML configures example.com as a secondary of primary (address:port), signed with
// the transfer tests' key, its copy kept in dir/state; onward adds a transfer block serving
// it on to 127.0.0.0/8 and notifying notify.
func secondaryYAML(primary, notify string) string {
	y := `state_dir: state
tsig_keys:
  - {name: xfr-key, algorithm: hmac-sha256, secret: "` + xfrSecret + `"}
zones:
  - origin: example.com.
    secondary: {primaries: [` + primary + `], tsig: xfr-key}
`
	if notify != "" {
		y += "    transfer: {allow: [127.0.0.0/8], key: xfr-key, notify: [" + notify + "]}\n"
	}
	return y
}

// startSecondary starts switchyard on port with yml, its files in dir; the server stops when
// the test ends (or earlier with the returned stop, for a restart).
func startSecondary(t *testing.T, dir string, port int, yml string) (*Server, func()) {
	t.Helper()
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("parse config: %v\n%s", err, yml)
	}
	cfg.Listen, cfg.Dir = fmt.Sprintf("127.0.0.1:%d", port), dir
	srv, err := NewServer(cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return srv, startBuilt(t, srv)
}

// waitSerial waits until addr serves example.com at serial want.
func waitSerial(t *testing.T, addr string, want uint32, what string) {
	t.Helper()
	var last error
	testutil.Eventually(t, 30*time.Second, func() bool {
		s, err := soaSerial(addr)
		if err == nil && s != want {
			err = fmt.Errorf("serial %d", s)
		}
		last = err
		return err == nil
	}, "%s: %s does not serve serial %d: %v", what, addr, want, func() any { return last })
}

// transfersIn returns how many transfers of kind the secondary srv made of example.com.
func transfersIn(srv *Server, kind string) float64 {
	return counterValue(srv.ops.transfersIn.WithLabelValues("example.com.", kind, "ok"))
}

// TestSecondaryOfSwitchyard runs switchyard as the secondary of a switchyard primary and as the
// primary of a third: AXFR at start, IXFR after a NOTIFY, the copy kept across a restart (served
// before any primary answers, the next transfer incremental), and the zone served onward.
func TestSecondaryOfSwitchyard(t *testing.T) {
	secPort, thirdPort := secondaryPorts.free(t), secondaryPorts.free(t)
	secAddr := fmt.Sprintf("127.0.0.1:%d", secPort)
	primary, reload := xfrPrimary(t, secAddr)
	dir := t.TempDir()
	thirdAddr := fmt.Sprintf("127.0.0.1:%d", thirdPort)
	yml := secondaryYAML(primary.Addr().String(), thirdAddr)
	sec, stop := startSecondary(t, dir, secPort, yml)
	// The third takes the zone from the secondary, which notifies it onward.
	third, _ := startSecondary(t, t.TempDir(), thirdPort, secondaryYAML(secAddr, ""))

	waitSerial(t, secAddr, 1, "after AXFR")
	if err := sameAnswers(primary.Addr().String(), secAddr); err != nil {
		t.Fatal(err)
	}
	if err := fallbackCheck(secAddr); err != nil {
		t.Fatal(err)
	}
	if n := transfersIn(sec, "AXFR"); n != 1 {
		t.Errorf("AXFR transfers in = %v, want 1", n)
	}
	waitSerial(t, thirdAddr, 1, "onward")

	reload(2)
	waitSerial(t, secAddr, 2, "after NOTIFY")
	if err := sameAnswers(primary.Addr().String(), secAddr); err != nil {
		t.Fatal(err)
	}
	if n := transfersIn(sec, "IXFR"); n != 1 {
		t.Errorf("IXFR transfers in = %v, want 1 (the change by incremental transfer)", n)
	}
	waitSerial(t, thirdAddr, 2, "onward after NOTIFY from the secondary")
	if n := transfersIn(third, "IXFR"); n != 1 {
		t.Errorf("the third's IXFR transfers in = %v, want 1", n)
	}

	// Restart: the copy serves at once, and the next change comes by IXFR from its serial.
	stop()
	if _, err := os.Stat(filepath.Join(dir, "state", "example.com.zone")); err != nil {
		t.Fatalf("no saved copy: %v", err)
	}
	sec, _ = startSecondary(t, dir, secPort, yml)
	if s, err := soaSerial(secAddr); err != nil || s != 2 {
		t.Fatalf("after restart: serial %d, %v; want the saved copy's 2 at once", s, err)
	}
	reload(3)
	waitSerial(t, secAddr, 3, "after restart and NOTIFY")
	if n, full := transfersIn(sec, "IXFR"), transfersIn(sec, "AXFR")+transfersIn(sec, "IXFR-as-AXFR"); n != 1 || full != 0 {
		t.Errorf("after restart: IXFR %v, full %v; want 1 incremental transfer and no full one", n, full)
	}
	if err := sameAnswers(primary.Addr().String(), secAddr); err != nil {
		t.Fatal(err)
	}
}

// TestSecondaryNotifyAndExpire checks that a NOTIFY from elsewhere than a primary is refused,
// and that a zone whose primary stays silent past the SOA expire interval answers SERVFAIL
// (switchyard_dns_zone_expired 1) until the primary answers again.
func TestSecondaryNotifyAndExpire(t *testing.T) {
	zoneText := "$ORIGIN short.test.\n@ 60 IN SOA ns1 hostmaster 7 1 1 3 60\n@ 60 IN NS ns1\nns1 60 IN A 192.0.2.53\nwww 60 IN A 192.0.2.80\n"
	primaryPort := secondaryPorts.free(t)
	top := "tsig_keys:\n  - {name: xfr-key, secret: \"" + xfrSecret + "\"}\n"
	pdir := t.TempDir()
	if err := os.WriteFile(filepath.Join(pdir, "zone"), []byte(zoneText), 0o644); err != nil {
		t.Fatal(err)
	}
	pyml := top + "zones:\n  - origin: short.test.\n    file: zone\n    transfer: {key: xfr-key}\n"
	_, stopPrimary := startSecondary(t, pdir, primaryPort, pyml)
	primaryAddr := fmt.Sprintf("127.0.0.1:%d", primaryPort)

	secPort := secondaryPorts.free(t)
	secAddr := fmt.Sprintf("127.0.0.1:%d", secPort)
	syml := top + "zones:\n  - origin: short.test.\n    secondary: {primaries: [" + primaryAddr + "], tsig: xfr-key}\n"
	sec, _ := startSecondary(t, t.TempDir(), secPort, syml)
	answer := func() (*mdns.Msg, error) {
		m, _, err := Query(context.Background(), secAddr, "www.short.test.", mdns.TypeA, QueryOptions{Timeout: 500 * time.Millisecond})
		return m, err
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		m, err := answer()
		return err == nil && m.Rcode == mdns.RcodeSuccess && len(m.Answer) == 1
	}, "the secondary does not answer www.short.test after the transfer")

	// A NOTIFY from an address that is not a primary (127.0.0.2) is refused.
	n := new(mdns.Msg)
	n.SetNotify("short.test.")
	c := &mdns.Client{Net: "udp", Timeout: time.Second,
		Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP("127.0.0.2")}}}
	resp, _, err := c.Exchange(n, secAddr)
	if err != nil {
		t.Fatalf("notify: %v", err)
	}
	if resp.Rcode != mdns.RcodeRefused {
		t.Errorf("NOTIFY from a non-primary: %s, want REFUSED", mdns.RcodeToString[resp.Rcode])
	}

	stopPrimary()
	testutil.Eventually(t, 15*time.Second, func() bool {
		m, err := answer()
		return err == nil && m.Rcode == mdns.RcodeServerFailure
	}, "the zone did not expire (SERVFAIL) after its primary went silent")
	if got := gaugeOf(t, sec, "switchyard_dns_zone_expired", "short.test."); got != 1 {
		t.Errorf("switchyard_dns_zone_expired = %v, want 1", got)
	}

	startSecondary(t, pdir, primaryPort, pyml)
	testutil.Eventually(t, 15*time.Second, func() bool {
		m, err := answer()
		return err == nil && m.Rcode == mdns.RcodeSuccess && len(m.Answer) == 1
	}, "the zone is not served again after its primary came back")
	if got := gaugeOf(t, sec, "switchyard_dns_zone_expired", "short.test."); got != 0 {
		t.Errorf("switchyard_dns_zone_expired = %v after the primary came back, want 0", got)
	}
}

// gaugeOf returns the value of the gauge name{zone} in srv's registry (-1 when absent).
func gaugeOf(t *testing.T, srv *Server, name, zone string) float64 {
	t.Helper()
	fams, err := srv.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "zone" && l.GetValue() == zone {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// refPrimary starts a real primary of example.com with zone text on port, notifying the
// switchyard secondary at notify (address:port) and allowing it transfers signed with xfr-key.
type refPrimary func(t *testing.T, port int, zoneText, notify string) *refServer

// testSecondaryOfRef runs switchyard as the secondary of a real primary: AXFR at start; a zone
// file edit reloaded on the primary arrives after its NOTIFY by IXFR; a restart serves the
// saved copy at once and the next change comes by IXFR too.
func testSecondaryOfRef(t *testing.T, start refPrimary) {
	port, secPort := secondaryPorts.free(t), secondaryPorts.free(t)
	secAddr := fmt.Sprintf("127.0.0.1:%d", secPort)
	prim := start(t, port, xfrZoneText(1), secAddr)
	edit := func(serial int) {
		if err := os.WriteFile(filepath.Join(prim.dir, "zone"), []byte(xfrZoneText(serial)), 0o644); err != nil {
			t.Fatal(err)
		}
		prim.reload(t)
	}
	dir := t.TempDir()
	yml := secondaryYAML(prim.addr, "")
	sec, stop := startSecondary(t, dir, secPort, yml)
	waitSerial(t, secAddr, 1, "after AXFR from "+prim.name)
	if err := sameAnswers(prim.addr, secAddr); err != nil {
		t.Fatalf("after AXFR: %v", err)
	}
	if n := transfersIn(sec, "AXFR"); n != 1 {
		t.Errorf("AXFR transfers in = %v, want 1", n)
	}
	edit(2)
	waitSerial(t, secAddr, 2, "after "+prim.name+"'s reload and NOTIFY")
	if err := sameAnswers(prim.addr, secAddr); err != nil {
		t.Fatalf("after the change: %v", err)
	}
	if n := transfersIn(sec, "IXFR"); n != 1 {
		t.Errorf("IXFR transfers in = %v (IXFR-as-AXFR %v), want the change by 1 incremental transfer\n%s",
			n, transfersIn(sec, "IXFR-as-AXFR"), prim.log())
	}
	stop()
	sec, _ = startSecondary(t, dir, secPort, yml)
	if s, err := soaSerial(secAddr); err != nil || s != 2 {
		t.Fatalf("after restart: serial %d, %v; want the saved copy's 2 at once", s, err)
	}
	edit(3)
	waitSerial(t, secAddr, 3, "after restart and "+prim.name+"'s NOTIFY")
	if n, full := transfersIn(sec, "IXFR"), transfersIn(sec, "AXFR")+transfersIn(sec, "IXFR-as-AXFR"); n != 1 || full != 0 {
		t.Errorf("after restart: IXFR %v, full %v; want 1 incremental transfer and no full one\n%s", n, full, prim.log())
	}
	if err := sameAnswers(prim.addr, secAddr); err != nil {
		t.Fatalf("after restart and change: %v", err)
	}
}

// TestSecondaryOfNSD takes the zone from a real NSD primary (IXFR out: create-ixfr).
func TestSecondaryOfNSD(t *testing.T) {
	testSecondaryOfRef(t, func(t *testing.T, port int, zoneText, notify string) *refServer {
		top := fmt.Sprintf("key:\n  name: xfr-key\n  algorithm: hmac-sha256\n  secret: \"%s\"\n", xfrSecret)
		host, p, _ := strings.Cut(notify, ":")
		zone := fmt.Sprintf("  provide-xfr: 127.0.0.1 xfr-key\n  notify: %s@%s xfr-key\n  store-ixfr: yes\n  create-ixfr: yes\n", host, p)
		return startNSDOn(t, port, "example.com", zoneText, top, zone)
	})
}

// TestSecondaryOfKnot takes the zone from a real Knot primary (IXFR from the zone file's
// differences: zonefile-load: difference).
func TestSecondaryOfKnot(t *testing.T) {
	testSecondaryOfRef(t, func(t *testing.T, port int, zoneText, notify string) *refServer {
		host, p, _ := strings.Cut(notify, ":")
		top := fmt.Sprintf(`key:
  - id: xfr-key
    algorithm: hmac-sha256
    secret: %s
remote:
  - id: sec
    address: %s@%s
    key: xfr-key
acl:
  - id: xfr
    address: 127.0.0.1
    key: xfr-key
    action: transfer
`, xfrSecret, host, p)
		return startKnotOn(t, port, "example.com", zoneText, top,
			"    notify: sec\n    acl: xfr\n    zonefile-load: difference\n    journal-content: changes\n")
	})
}

// TestSecondaryOfBIND takes the zone from a real BIND primary (ixfr-from-differences).
func TestSecondaryOfBIND(t *testing.T) {
	testSecondaryOfRef(t, func(t *testing.T, port int, zoneText, notify string) *refServer {
		host, p, _ := strings.Cut(notify, ":")
		top := fmt.Sprintf("key \"xfr-key\" { algorithm hmac-sha256; secret \"%s\"; };\n", xfrSecret)
		zone := fmt.Sprintf("  allow-transfer { key xfr-key; };\n  notify explicit;\n  also-notify { %s port %s key xfr-key; };\n  ixfr-from-differences yes;\n", host, p)
		return startBIND(t, port, "example.com", zoneText, top, zone)
	})
}
