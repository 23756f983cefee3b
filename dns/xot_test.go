package dns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/pki"
	"github.com/switchyard/switchyard/internal/testutil"
)

// xotPorts are the XoT tests' ports (secondaries, which need fixed ports for NOTIFY).
var xotPorts = &portRange{first: 22700, last: 22799}

// xotPrimary starts the transfer tests' primary with a tls listener (certificate for dns.test)
// notifying notify; it returns the server, the certificate's path and a reload to a new serial.
func xotPrimary(t *testing.T, notify string) (*Server, string, func(serial int)) {
	t.Helper()
	certPath, keyPath, _ := testutil.WriteCert(t, t.TempDir(), "dns.test")
	srv, reload := xotPrimaryOn(t, notify, "127.0.0.1:0", "127.0.0.1:0", certPath, keyPath)
	return srv, certPath, reload
}

// xotPrimaryOn is xotPrimary listening on listen and tlsListen with the certificate given.
func xotPrimaryOn(t *testing.T, notify, listen, tlsListen, certPath, keyPath string) (*Server, func(serial int)) {
	t.Helper()
	tlsYAML := "tls: {listen: \"" + tlsListen + "\", certificates: [{cert: " + certPath + ", key: " + keyPath + "}]}\n"
	return xfrPrimaryWith(t, notify, listen, tlsYAML)
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

// xotCA makes a CA and a certificate it issues for dns.test (BIND verifies a peer against a CA
// file, as OpenSSL does: a self-signed leaf without keyCertSign is no CA to it).
func xotCA(t *testing.T) (caFile, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("switchyard xot test ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if caFile, err = ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue("dns.test", nil, []string{"dns.test"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if certFile, keyFile, err = pair.Write(dir, "dns"); err != nil {
		t.Fatal(err)
	}
	return caFile, certFile, keyFile
}

// bindXoTKey is the transfer key in named.conf's syntax.
var bindXoTKey = fmt.Sprintf("key \"xfr-key\" { algorithm hmac-sha256; secret \"%s\"; };\n", xfrSecret)

// TestXoTBINDSecondary: BIND 9.18 as the secondary of switchyard's XoT listener. named's
// primaries name only the TLS port (the plain one is another), with a tls clause verifying the
// certificate against the CA and the name dns.test: the AXFR at start and the IXFR after a
// NOTIFY (to named's plain port) go over TLS, TSIG-signed inside it. A named verifying another
// name gets nothing.
func TestXoTBINDSecondary(t *testing.T) {
	needBinary(t, "named", "bind9")
	caFile, certFile, keyFile := xotCA(t)
	bindPort, plainPort, tlsPort, badPort := fleetPorts.free(t), fleetPorts.free(t), fleetPorts.free(t), fleetPorts.free(t)
	primary, reload := xotPrimaryOn(t, fmt.Sprintf("127.0.0.1:%d", bindPort), fmt.Sprintf("127.0.0.1:%d", plainPort),
		fmt.Sprintf("127.0.0.1:%d", tlsPort), certFile, keyFile)
	bind := func(port int, name string) *refServer {
		top := bindXoTKey + fmt.Sprintf("tls sy { ca-file \"%s\"; remote-hostname \"%s\"; };\n", caFile, name)
		zone := fmt.Sprintf("  type secondary;\n  file \"sec.db\";\n  primaries { 127.0.0.1 port %d key xfr-key tls sy; };\n", tlsPort)
		return runBIND(t, port, "example.com", "", top, "", zone)
	}
	sec := bind(bindPort, "dns.test")
	testutil.Eventually(t, 30*time.Second, func() bool { s, err := soaSerial(sec.addr); return err == nil && s == 1 },
		"named did not load the zone by AXFR over TLS:\n%s", func() any { return sec.log() })
	if err := sameAnswers(primary.Addr().String(), sec.addr); err != nil {
		t.Fatalf("after AXFR over TLS: %v", err)
	}
	reload(2)
	testutil.Eventually(t, 30*time.Second, func() bool { s, err := soaSerial(sec.addr); return err == nil && s == 2 },
		"named did not follow serial 2 after NOTIFY:\n%s", func() any { return sec.log() })
	if err := sameAnswers(primary.Addr().String(), sec.addr); err != nil {
		t.Fatalf("after IXFR over TLS: %v", err)
	}
	if n := counterValue(primary.ops.transfers.WithLabelValues("example.com.", "IXFR", "ok")); n < 1 {
		t.Errorf("no incremental transfer served to named (IXFR ok = %v)\n%s", n, sec.log())
	}

	bad := bind(badPort, "other.test")
	testutil.Eventually(t, 30*time.Second, func() bool { return strings.Contains(bad.log(), "TLS peer certificate verification failed") },
		"named verifying other.test did not fail on the certificate:\n%s", func() any { return bad.log() })
	if s, err := soaSerial(bad.addr); err == nil {
		t.Errorf("named verifying other.test got the zone (serial %d)\n%s", s, bad.log())
	}
}

// TestXoTSecondaryOfBIND: switchyard as the secondary of BIND 9.18 over XoT. named listens
// for TLS on a port of its own (listen-on ... tls) and allows transfers over TLS only
// (allow-transfer transport tls); the secondary's primary is that port, verified against the
// CA as dns.test: SOA queries, the AXFR and the IXFR after named's NOTIFY all go over TLS.
func TestXoTSecondaryOfBIND(t *testing.T) {
	needBinary(t, "named", "bind9")
	caFile, certFile, keyFile := xotCA(t)
	bindPort, bindTLS, secPort := fleetPorts.free(t), fleetPorts.free(t), fleetPorts.free(t)
	secAddr := fmt.Sprintf("127.0.0.1:%d", secPort)
	top := bindXoTKey + fmt.Sprintf("tls sy { key-file \"%s\"; cert-file \"%s\"; };\n", keyFile, certFile)
	opt := fmt.Sprintf("  listen-on port %d tls sy { 127.0.0.1; };\n", bindTLS)
	zone := fmt.Sprintf("  type primary;\n  file \"zone\";\n  allow-transfer port %d transport tls { key xfr-key; };\n"+
		"  notify explicit;\n  also-notify { 127.0.0.1 port %d key xfr-key; };\n  ixfr-from-differences yes;\n", bindTLS, secPort)
	prim := runBIND(t, bindPort, "example.com", xfrZoneText(1), top, opt, zone)
	yml := strings.Replace(secondaryYAML(fmt.Sprintf("127.0.0.1:%d", bindTLS), ""), "tsig: xfr-key}",
		"tsig: xfr-key, tls: {ca_file: "+caFile+", server_name: dns.test}}", 1)
	sec, _ := startSecondary(t, t.TempDir(), secPort, yml)
	waitSerial(t, secAddr, 1, "after AXFR over TLS from named")
	if err := sameAnswers(prim.addr, secAddr); err != nil {
		t.Fatalf("after AXFR: %v", err)
	}
	if err := os.WriteFile(filepath.Join(prim.dir, "zone"), []byte(xfrZoneText(2)), 0o644); err != nil {
		t.Fatal(err)
	}
	prim.reload(t)
	waitSerial(t, secAddr, 2, "after named's reload and NOTIFY")
	if err := sameAnswers(prim.addr, secAddr); err != nil {
		t.Fatalf("after IXFR: %v", err)
	}
	if a, i := transfersIn(sec, "AXFR"), transfersIn(sec, "IXFR"); a != 1 || i != 1 {
		t.Errorf("transfers in: AXFR %v IXFR %v, want 1 and 1\n%s", a, i, prim.log())
	}
}
