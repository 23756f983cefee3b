package l7

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	tu "github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// acmeProxy is an L7 proxy whose TLS listener obtains its certificate from Pebble.
type acmeProxy struct {
	s                 *Server
	httpAddr, tlsAddr string
	log               *tu.SyncBuffer
}

// startACMEProxy serves a proxy to a backend with a plain listener at httpAddr ("" for none) and
// a TLS listener at tlsAddr whose acme: block orders name from p with the challenges, keeping
// its certificates in storage.
func startACMEProxy(t *testing.T, p *tu.Pebble, httpAddr, tlsAddr, storage, name string, challenges ...string) *acmeProxy {
	t.Helper()
	return startACMEProxyWith(t, p, "", httpAddr, tlsAddr, storage, name, challenges...)
}

// startACMEProxyWith is startACMEProxy with more fields for the plain listener (e.g.
// "redirect_https: 443").
func startACMEProxyWith(t *testing.T, p *tu.Pebble, plainFields, httpAddr, tlsAddr, storage, name string, challenges ...string) *acmeProxy {
	t.Helper()
	b := startBackend(t, "b", nil)
	plain := ""
	if httpAddr != "" {
		plain = fmt.Sprintf("- {address: %q, %s}\n", httpAddr, plainFields)
	}
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
listeners:
%s- address: %q
  tls:
    acme: {directory: %q, ca_root: %q, domains: [%s], challenges: [%s], storage: %q}
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, plain, tlsAddr, p.Directory, p.CARoot, name, strings.Join(challenges, ", "), storage, b.addr)))
	if err != nil {
		t.Fatal(err)
	}
	ap := &acmeProxy{httpAddr: httpAddr, tlsAddr: tlsAddr, log: &tu.SyncBuffer{}}
	if ap.s, err = NewServer(cfg, WithLogger(slog.New(slog.NewTextHandler(ap.log, nil)))); err != nil {
		t.Fatal(err)
	}
	if _, err := ap.s.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ap.s.Close() })
	return ap
}

// waitCert waits for the TLS listener to serve name with a certificate that roots trust.
func (ap *acmeProxy) waitCert(t *testing.T, name string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	var cert *x509.Certificate
	tu.Eventually(t, 30*time.Second, func() bool {
		var err error
		cert, err = tu.LeafCert(ap.tlsAddr, name, roots)
		return err == nil
	}, "%s not served with a certificate from pebble; log:\n%s", name, ap.log)
	return cert
}

// httpsGet fetches path over HTTP/2 from the TLS listener for name, verifying the certificate.
func httpsGet(t *testing.T, addr, name string, roots *x509.CertPool) string {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{ServerName: name, RootCAs: roots}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	resp, body := get(t, &http.Client{Transport: tr}, "GET", "https://"+addr+"/x", nil)
	if resp.StatusCode != 200 || resp.ProtoMajor != 2 {
		t.Fatalf("GET over TLS = %s %s, want 200 over HTTP/2", resp.Proto, resp.Status)
	}
	return body
}

func acmeCounter(t *testing.T, s *Server, name, op string) float64 {
	return tu.Counter(t, s.metrics.reg, name, "op", op)
}

// HTTP-01 answered on a plain listener served by the event loops (the request core hands the
// challenge path to net/http): the TLS listener then serves the issued certificate over h2,
// and plain requests still take the fast path.
func TestACMEHTTP01(t *testing.T) {
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, httpAddr), TLSPort: tu.Port(t, tlsAddr)})
	ap := startACMEProxy(t, p, httpAddr, tlsAddr, t.TempDir(), "l7.switchyard.test", tlsconf.HTTP01)
	roots := p.Roots(t)
	cert := ap.waitCert(t, "l7.switchyard.test", roots)
	if cert.DNSNames[0] != "l7.switchyard.test" {
		t.Fatalf("served certificate for %v", cert.DNSNames)
	}
	if !strings.Contains(ap.log.String(), "challenge=http-01") {
		t.Fatalf("no http-01 challenge in the log:\n%s", ap.log)
	}
	httpsGet(t, tlsAddr, "l7.switchyard.test", roots)
	before := ap.s.served.core()
	resp, _ := get(t, testClient, "GET", "http://"+httpAddr+"/x", nil)
	if resp.StatusCode != 200 || ap.s.served.core() == before {
		t.Fatalf("plain GET = %s, fast path served %d", resp.Status, ap.s.served.core()-before)
	}
	if n := acmeCounter(t, ap.s, "switchyard_tls_acme_obtained_total", "obtain"); n != 1 {
		t.Fatalf("switchyard_tls_acme_obtained_total{op=obtain} = %v, want 1", n)
	}
}

// HTTP-01 answered on a redirect_https listener before the redirect.
func TestACMEHTTP01OnRedirectListener(t *testing.T) {
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, httpAddr), TLSPort: tu.Port(t, tlsAddr)})
	ap := startACMEProxyWith(t, p, fmt.Sprintf("redirect_https: %d", tu.Port(t, tlsAddr)), httpAddr, tlsAddr, t.TempDir(), "redirect.switchyard.test", tlsconf.HTTP01)
	ap.waitCert(t, "redirect.switchyard.test", p.Roots(t))
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if resp, _ := get(t, c, "GET", "http://"+httpAddr+"/x", nil); resp.StatusCode != http.StatusPermanentRedirect {
		t.Fatalf("plain GET = %s, want the redirect", resp.Status)
	}
}

// TLS-ALPN-01 answered on the TLS listener itself (ServeTLS keeps acme-tls/1), with no plain
// listener at all.
func TestACMETLSALPN01(t *testing.T) {
	tlsAddr := tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: 1, TLSPort: tu.Port(t, tlsAddr)})
	ap := startACMEProxy(t, p, "", tlsAddr, t.TempDir(), "alpn.switchyard.test", tlsconf.TLSALPN1)
	roots := p.Roots(t)
	ap.waitCert(t, "alpn.switchyard.test", roots)
	if !strings.Contains(ap.log.String(), "challenge=tls-alpn-01") {
		t.Fatalf("no tls-alpn-01 challenge in the log:\n%s", ap.log)
	}
	httpsGet(t, tlsAddr, "alpn.switchyard.test", roots)
}

// Short-lived certificates are renewed by certmagic's maintenance and the new one served by
// the same listener, without a restart.
func TestACMERenewal(t *testing.T) {
	defer func(d time.Duration) { tlsconf.MaintenanceInterval = d }(tlsconf.MaintenanceInterval)
	tlsconf.MaintenanceInterval = time.Second
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, httpAddr), TLSPort: tu.Port(t, tlsAddr), Validity: 20 * time.Second})
	ap := startACMEProxy(t, p, httpAddr, tlsAddr, t.TempDir(), "renew.switchyard.test", tlsconf.HTTP01, tlsconf.TLSALPN1)
	roots := p.Roots(t)
	first := ap.waitCert(t, "renew.switchyard.test", roots)
	tu.Eventually(t, 40*time.Second, func() bool {
		c, err := tu.LeafCert(tlsAddr, "renew.switchyard.test", roots)
		return err == nil && c.SerialNumber.Cmp(first.SerialNumber) != 0
	}, "the certificate was not renewed and swapped in; log:\n%s", ap.log)
	if n := acmeCounter(t, ap.s, "switchyard_tls_acme_obtained_total", "renew"); n < 1 {
		t.Fatalf("switchyard_tls_acme_obtained_total{op=renew} = %v, want >= 1", n)
	}
	httpsGet(t, tlsAddr, "renew.switchyard.test", roots)
}

// A CA that is down: a restarted proxy serves the stored certificate; one with nothing stored
// starts anyway (its plain listener serves), logs the failure with its next retry and counts it.
func TestACMECADown(t *testing.T) {
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, httpAddr), TLSPort: tu.Port(t, tlsAddr)})
	storage := t.TempDir()
	ap := startACMEProxy(t, p, httpAddr, tlsAddr, storage, "down.switchyard.test", tlsconf.HTTP01)
	roots := p.Roots(t)
	first := ap.waitCert(t, "down.switchyard.test", roots)
	ap.s.Close()
	p.Stop()

	ap = startACMEProxy(t, p, httpAddr, tlsAddr, storage, "down.switchyard.test", tlsconf.HTTP01)
	if c := ap.waitCert(t, "down.switchyard.test", roots); c.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("restarted proxy serves serial %x, want the stored %x", c.SerialNumber, first.SerialNumber)
	}
	httpsGet(t, tlsAddr, "down.switchyard.test", roots)
	ap.s.Close()

	ap = startACMEProxy(t, p, httpAddr, tlsAddr, t.TempDir(), "down.switchyard.test", tlsconf.HTTP01)
	tu.Eventually(t, 20*time.Second, func() bool {
		return acmeCounter(t, ap.s, "switchyard_tls_acme_failures_total", "obtain") >= 1 && strings.Contains(ap.log.String(), "next_retry=")
	}, "no failure counted and logged with its next retry; log:\n%s", ap.log)
	if _, err := tu.LeafCert(tlsAddr, "down.switchyard.test", roots); err == nil {
		t.Fatal("a certificate was served with nothing stored and the CA down")
	}
	if resp, _ := get(t, testClient, "GET", "http://"+httpAddr+"/x", nil); resp.StatusCode != 200 {
		t.Fatalf("plain listener: %s", resp.Status)
	}
}

// HTTP-01 needs a plain listener; the error names the fix.
func TestACMEConfigNeedsPlainListener(t *testing.T) {
	_, err := ParseConfig([]byte(`
listeners:
- address: 127.0.0.1:8443
  tls: {acme: {directory: https://ca.example/dir, domains: [a.example], challenges: [http-01], storage: /tmp/acme}}
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: 127.0.0.1:9}]}]
`))
	if err == nil || !strings.Contains(err.Error(), "listeners[0].tls.acme.challenges") || !strings.Contains(err.Error(), "add one") {
		t.Fatalf("err = %v, want listeners[0].tls.acme.challenges naming the fix", err)
	}
	_, err = ParseConfig([]byte(`
listeners:
- address: 127.0.0.1:8443
  tls: {acme: {directory: http://ca.example/dir, domains: [a.example], storage: /tmp/acme}}
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: 127.0.0.1:9}]}]
`))
	if err == nil || !strings.Contains(err.Error(), "listeners[0].tls.acme.directory") || !strings.Contains(err.Error(), "https") {
		t.Fatalf("err = %v, want listeners[0].tls.acme.directory asking for https", err)
	}
}
