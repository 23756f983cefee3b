package dns

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// xotPorts are the XoT tests' ports (secondaries, which need fixed ports for NOTIFY).
var xotPorts = &portRange{first: 22700, last: 22799}

// xotPrimary starts the transfer tests' primary with a tls listener (certificate for dns.test)
// notifying notify; it returns the server, the certificate's path and a reload to a new serial.
func xotPrimary(t *testing.T, notify string) (*Server, string, func(serial int)) {
	t.Helper()
	dir := t.TempDir()
	certPath, keyPath, _ := testutil.WriteCert(t, dir, "dns.test")
	load := func(serial int) *config.Config {
		if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(xfrZoneText(serial)), 0o644); err != nil {
			t.Fatal(err)
		}
		yml := xfrYAML(notify) + "tls: {listen: \"127.0.0.1:0\", certificates: [{cert: " + certPath + ", key: " + keyPath + "}]}\n"
		cfg, err := config.Parse([]byte(yml))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Listen, cfg.Dir = "127.0.0.1:0", dir
		return cfg
	}
	srv, err := NewServer(load(1), Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := srv.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); srv.Close() })
	return srv, certPath, func(serial int) {
		if err := srv.Reload(load(serial)); err != nil {
			t.Fatal(err)
		}
	}
}

// XoT (RFC 9103) between two switchyard servers: the secondary asks only the primary's TLS
// port (its plain port is another), so the SOA queries, the AXFR and the IXFR after a NOTIFY all
// go over TLS 1.3, TSIG-signed inside it; a secondary checking for another name in the
// certificate gets nothing.
func TestXoTSwitchyardToSwitchyard(t *testing.T) {
	secPort, badPort := xotPorts.free(t), xotPorts.free(t)
	secAddr := fmt.Sprintf("127.0.0.1:%d", secPort)
	primary, certPath, reload := xotPrimary(t, secAddr)
	tlsAddr := primary.TLSAddr().String()
	if primary.TLSAddr().Port() == primary.Addr().Port() {
		t.Fatal("the tls listener shares the plain port: the test would prove nothing")
	}
	yml := strings.Replace(secondaryYAML(tlsAddr, ""), "tsig: xfr-key}",
		"tsig: xfr-key, tls: {ca_file: "+certPath+", server_name: dns.test}}", 1)
	sec, _ := startSecondary(t, t.TempDir(), secPort, yml)
	waitSerial(t, secAddr, 1, "after AXFR over TLS")
	if err := sameAnswers(primary.Addr().String(), secAddr); err != nil {
		t.Fatal(err)
	}
	reload(2)
	waitSerial(t, secAddr, 2, "after NOTIFY, IXFR over TLS")
	if a, i := transfersIn(sec, "AXFR"), transfersIn(sec, "IXFR"); a != 1 || i != 1 {
		t.Errorf("transfers in: AXFR %v IXFR %v, want 1 and 1", a, i)
	}
	if err := sameAnswers(primary.Addr().String(), secAddr); err != nil {
		t.Fatal(err)
	}

	badYML := strings.Replace(yml, "server_name: dns.test", "server_name: other.test", 1)
	bad, _ := startSecondary(t, t.TempDir(), badPort, badYML)
	testutil.Eventually(t, 10*time.Second, func() bool {
		return strings.Contains(secondaryErr(bad, "example.com."), "certificate")
	}, "the secondary verifying another name to fail on the certificate: %q", func() any { return secondaryErr(bad, "example.com.") })
	if s, err := soaSerial(fmt.Sprintf("127.0.0.1:%d", badPort)); err == nil {
		t.Errorf("a secondary verifying another name got the zone (serial %d)", s)
	}
}

// A secondary's tls block: port 853 added, a missing ca_file fails the start with the field.
func TestXoTConfig(t *testing.T) {
	c, err := config.Parse([]byte("zones:\n  - origin: a.test\n    secondary: {primaries: [192.0.2.1], tls: {server_name: ns.a.test}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Zones[0].Secondary.Primaries[0]; p != "192.0.2.1:853" {
		t.Errorf("primary %s, want port 853 with tls", p)
	}
	c, err = config.Parse([]byte("zones:\n  - origin: a.test\n    secondary: {primaries: [192.0.2.1], tls: {ca_file: /nonexistent.pem}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewServer(c, Options{}); err == nil || !strings.Contains(err.Error(), "field secondary.tls.ca_file") {
		t.Errorf("missing ca_file: %v", err)
	}
}

// secondaryErr is the last refresh error of a secondary zone of s.
func secondaryErr(s *Server, origin string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.running[origin]; r != nil {
		return r.z.Status().Err
	}
	return ""
}
