package dns

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// TestACMEDNS01ThroughTheDNSStop: a stop's ACME client (internal/tlsconf, certmagic) obtains a
// wildcard certificate from Pebble by dns-01, publishing _acme-challenge with RFC 2136 updates
// (TSIG, the acme key's allow-list) to the DNS stop, which Pebble asks for the TXT record; the
// record is gone once the certificate is issued.
func TestACMEDNS01ThroughTheDNSStop(t *testing.T) {
	dir := t.TempDir()
	port := updPorts.free(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	os.WriteFile(filepath.Join(dir, "dns.yaml"), []byte(fmt.Sprintf(`listen: %s
tsig_keys: [{name: acme, secret: "%s"}]
zones:
  - origin: switchyard.test.
    records: ["@ NS ns1", "ns1 A 127.0.0.1"]
    update: {allow: [{key: acme, names: [_acme-challenge], types: [TXT]}]}
`, addr, acmeSecret)), 0o600)
	updServer(t, dir)
	tlsAddr := testutil.FreeAddr(t)
	p := testutil.StartPebble(t, testutil.PebbleOptions{HTTPPort: testutil.Port(t, testutil.FreeAddr(t)),
		TLSPort: testutil.Port(t, tlsAddr), DNSServer: addr})
	cs, err := tlsconf.Open(&tlsconf.Config{ACME: &tlsconf.ACME{Directory: p.Directory, CARoot: p.CARoot,
		Domains: []string{"switchyard.test", "*.switchyard.test"}, Storage: t.TempDir(),
		DNS01: &tlsconf.DNS01{Server: addr, TSIG: tlsconf.TSIGKey{Name: "acme", Secret: acmeSecret}}}}, tlsconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ln, err := tls.Listen("tcp", tlsAddr, cs.TLS)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	if err := cs.Manage("", tlsAddr); err != nil {
		t.Fatal(err)
	}
	roots := p.Roots(t)
	var cert *x509.Certificate
	testutil.Eventually(t, 60*time.Second, func() bool {
		cert, err = testutil.LeafCert(tlsAddr, "www.switchyard.test", roots)
		return err == nil
	}, "no wildcard certificate for www.switchyard.test by dns-01: %v", func() any { return err })
	if !slices.Contains(cert.DNSNames, "*.switchyard.test") {
		t.Fatalf("certificate names %v, want *.switchyard.test", cert.DNSNames)
	}
	testutil.Eventually(t, 60*time.Second, func() bool {
		_, err = testutil.LeafCert(tlsAddr, "switchyard.test", roots)
		return err == nil
	}, "no certificate for the apex switchyard.test by dns-01: %v", func() any { return err })
	// The challenge records were removed (certmagic's clean-up: an RFC 2136 delete).
	testutil.Eventually(t, 10*time.Second, func() bool {
		m := new(mdns.Msg)
		m.SetQuestion("_acme-challenge.switchyard.test.", mdns.TypeTXT)
		r, err := mdns.Exchange(m, addr)
		return err == nil && len(r.Answer) == 0
	}, "_acme-challenge TXT records left in the zone")
}
