package edge

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	tu "github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// acmeEdge starts an edge in front of origin with its plain listener at httpAddr and a TLS
// listener at tlsAddr (HTTP/3 too) whose acme: block orders name from p with the challenges.
func acmeEdge(t *testing.T, p *tu.Pebble, origin, httpAddr, tlsAddr, storage, name string, challenges ...string) (*Edge, *tu.SyncBuffer) {
	t.Helper()
	log := &tu.SyncBuffer{}
	cfg := Config{Listen: httpAddr, Origin: origin, Tiers: TierConfig{Token: testTierToken},
		TLS: &TLSConfig{Listen: tlsAddr, HTTP3: true}}
	cfg.TLS.ACME = &tlsconf.ACME{Directory: p.Directory, CARoot: p.CARoot, Domains: []string{name},
		Challenges: challenges, Storage: storage}
	e, err := New(cfg, WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e, log
}

// waitACMECert waits for the edge's TLS listener to serve name with a certificate roots trust.
func waitACMECert(t *testing.T, e *Edge, log *tu.SyncBuffer, name string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	var cert *x509.Certificate
	tu.Eventually(t, 30*time.Second, func() bool {
		var err error
		cert, err = tu.LeafCert(e.TLSAddr(), name, roots)
		return err == nil
	}, "%s not served with a certificate from pebble; log:\n%s", name, log)
	return cert
}

// verifiedGet fetches url for name over c's protocol and checks the origin's body came back.
func verifiedGet(t *testing.T, rt http.RoundTripper, url, name string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Host = name
	resp, err := (&http.Client{Transport: rt, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "acme origin" {
		t.Fatalf("GET %s (%s) = %d %q", url, resp.Proto, resp.StatusCode, body)
	}
}

func acmeOrigin(t *testing.T) string {
	return newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		io.WriteString(w, "acme origin")
	}).URL
}

// HTTP-01 answered on the plain listener (fast path on) before the cache: the TLS listener then
// serves the issued certificate, and cached objects are still hits on the fast path.
func TestACMEHTTP01(t *testing.T) {
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, httpAddr), TLSPort: tu.Port(t, tlsAddr)})
	e, log := acmeEdge(t, p, acmeOrigin(t), httpAddr, tlsAddr, t.TempDir(), "edge.switchyard.test", tlsconf.HTTP01)
	roots := p.Roots(t)
	waitACMECert(t, e, log, "edge.switchyard.test", roots)
	if !strings.Contains(log.String(), "challenge=http-01") {
		t.Fatalf("no http-01 challenge in the log:\n%s", log)
	}
	verifiedGet(t, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "edge.switchyard.test"}},
		"https://"+tlsAddr+"/obj", "edge.switchyard.test")
	for range 2 {
		verifiedGet(t, http.DefaultTransport, "http://"+httpAddr+"/obj", "edge.switchyard.test")
	}
	if e.stats.FastPath.Load() == 0 {
		t.Fatal("no hit on the fast path")
	}
	if n := tu.Counter(t, e.Registry(), "switchyard_tls_acme_obtained_total", "op", "obtain"); n != 1 {
		t.Fatalf("switchyard_tls_acme_obtained_total{op=obtain} = %v, want 1", n)
	}
}

// TLS-ALPN-01 answered on the edge's TLS listener; the issued certificate serves HTTP/3 too.
func TestACMETLSALPN01(t *testing.T) {
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: 1, TLSPort: tu.Port(t, tlsAddr)})
	e, log := acmeEdge(t, p, acmeOrigin(t), httpAddr, tlsAddr, t.TempDir(), "alpn.switchyard.test", tlsconf.TLSALPN1)
	roots := p.Roots(t)
	waitACMECert(t, e, log, "alpn.switchyard.test", roots)
	if !strings.Contains(log.String(), "challenge=tls-alpn-01") {
		t.Fatalf("no tls-alpn-01 challenge in the log:\n%s", log)
	}
	h3 := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "alpn.switchyard.test"}}
	defer h3.Close()
	verifiedGet(t, h3, "https://"+tlsAddr+"/obj", "alpn.switchyard.test")
}

// A CA that is down: a restarted edge serves the certificate it stored.
func TestACMECADownStored(t *testing.T) {
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, httpAddr), TLSPort: tu.Port(t, tlsAddr)})
	storage, origin := t.TempDir(), acmeOrigin(t)
	e, log := acmeEdge(t, p, origin, httpAddr, tlsAddr, storage, "down.switchyard.test", tlsconf.HTTP01)
	roots := p.Roots(t)
	first := waitACMECert(t, e, log, "down.switchyard.test", roots)
	e.Close()
	p.Stop()
	e, log = acmeEdge(t, p, origin, httpAddr, tlsAddr, storage, "down.switchyard.test", tlsconf.HTTP01)
	if c := waitACMECert(t, e, log, "down.switchyard.test", roots); c.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("restarted edge serves serial %x, want the stored %x", c.SerialNumber, first.SerialNumber)
	}
	verifiedGet(t, &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "down.switchyard.test"}},
		"https://"+tlsAddr+"/obj", "down.switchyard.test")
}
