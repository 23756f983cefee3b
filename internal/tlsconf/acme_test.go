package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	tu "github.com/switchyard/switchyard/internal/testutil"
)

func TestValidateACME(t *testing.T) {
	good := func() *ACME {
		return &ACME{Directory: "https://ca.example/dir", Domains: []string{"www.example.com"}, Storage: "/tmp/x"}
	}
	for _, tc := range []struct {
		name, path, want string
		edit             func(a *ACME)
	}{
		{"ok", "", "", func(a *ACME) {}},
		{"no directory", "tls.acme.directory", "empty", func(a *ACME) { a.Directory = "" }},
		{"http directory", "tls.acme.directory", "not an https URL", func(a *ACME) { a.Directory = "http://ca.example/dir" }},
		{"no domains", "tls.acme.domains", "list the names", func(a *ACME) { a.Domains = nil }},
		{"wildcard", "tls.acme.domains[1]", "dns-01", func(a *ACME) { a.Domains = append(a.Domains, "*.example.com") }},
		{"ip", "tls.acme.domains[0]", "not a DNS name", func(a *ACME) { a.Domains = []string{"10.0.0.1"} }},
		{"port", "tls.acme.domains[0]", "not a DNS name", func(a *ACME) { a.Domains = []string{"www.example.com:443"} }},
		{"unknown challenge", "tls.acme.challenges[1]", `unknown challenge "dns-01"; use http-01 or tls-alpn-01`, func(a *ACME) { a.Challenges = []string{"http-01", "dns-01"} }},
		{"no storage", "tls.acme.storage", "kept across restarts", func(a *ACME) { a.Storage = "" }},
		{"bad email", "tls.acme.email", "not an email", func(a *ACME) { a.Email = "ops" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := good()
			tc.edit(a)
			path, problem, ok := (&Config{ACME: a}).Validate("tls")
			if ok != (tc.path == "") || path != tc.path || !strings.Contains(problem, tc.want) {
				t.Fatalf("Validate = %q, %q, %v; want %q containing %q", path, problem, ok, tc.path, tc.want)
			}
		})
	}
	if _, _, ok := (&Config{}).Validate("tls"); ok {
		t.Fatal("a tls: block with neither certificates nor acme passed")
	}
}

// serveACME serves cs on a plain HTTP listener at httpAddr (HTTP-01, 404 otherwise) and a TLS
// listener at tlsAddr, until the test ends.
func serveACME(t *testing.T, cs *Certs, httpAddr, tlsAddr string) {
	t.Helper()
	for _, addr := range []string{httpAddr, tlsAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !cs.HandleHTTPChallenge(w, r) {
				http.NotFound(w, r)
			}
		})}
		if addr == tlsAddr {
			ln = tls.NewListener(ln, cs.TLS)
		}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
}

// TestACMEObtainAndRevoke: an HTTP-01 order against Pebble ends with the issued certificate
// served for the name, counted; Revoke revokes it at the CA.
func TestACMEObtainAndRevoke(t *testing.T) {
	httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
	p := tu.StartPebble(t, tu.PebbleOptions{HTTPPort: tu.Port(t, httpAddr), TLSPort: tu.Port(t, tlsAddr)})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	cfg := &Config{ACME: &ACME{Directory: p.Directory, CARoot: p.CARoot, Domains: []string{"rev.switchyard.test"},
		Challenges: []string{HTTP01}, Storage: t.TempDir()}}
	cs, err := Open(cfg, Options{Metrics: m}, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	serveACME(t, cs, httpAddr, tlsAddr)
	if err := cs.Manage(httpAddr, tlsAddr); err != nil {
		t.Fatal(err)
	}
	roots := p.Roots(t)
	var cert *x509.Certificate
	tu.Eventually(t, 30*time.Second, func() bool { cert, err = tu.LeafCert(tlsAddr, "rev.switchyard.test", roots); return err == nil },
		"no certificate from pebble served for rev.switchyard.test")
	if got := testutil.ToFloat64(m.obtained.WithLabelValues("rev.switchyard.test", "obtain")); got != 1 {
		t.Fatalf("switchyard_tls_acme_obtained_total{op=obtain} = %v, want 1", got)
	}
	if st := p.Status(t, cert.SerialNumber); st != "Valid" {
		t.Fatalf("pebble says %q before revocation", st)
	}
	if err := cs.Revoke(context.Background(), "rev.switchyard.test"); err != nil {
		t.Fatal(err)
	}
	if st := p.Status(t, cert.SerialNumber); st != "Revoked" {
		t.Fatalf("pebble says %q after Revoke, want Revoked", st)
	}
}
