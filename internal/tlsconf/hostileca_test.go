package tlsconf

import (
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/prometheus/client_golang/prometheus"

	tu "github.com/switchyard/switchyard/internal/testutil"
)

// A CA that answers with hostility, a redirect loop, a directory that is not JSON, or nothing at
// all (stalled), fails the order, which is counted and logged with its retry, while the
// listener goes on serving its file certificates and closes promptly. (No real CA behaves so on
// purpose; these are a few lines of net/http each.)
func TestACMEHostileCA(t *testing.T) {
	defer func(d time.Duration) { certmagic.HTTPTimeout = d }(certmagic.HTTPTimeout)
	certmagic.HTTPTimeout = 2 * time.Second // the stalled CA's wait
	stop := make(chan struct{})
	defer close(stop)
	modes := map[string]http.HandlerFunc{
		"redirect loop": func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, r.URL.String(), http.StatusFound) },
		"malformed directory": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"newNonce": 7, "newAccount": [`))
		},
		"stalled": func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-stop:
			case <-r.Context().Done():
			}
		},
	}
	cp, kp, fileCert := tu.WriteCert(t, t.TempDir(), "files.test")
	fileRoots := x509.NewCertPool()
	fileRoots.AddCert(fileCert)
	for name, h := range modes {
		t.Run(name, func(t *testing.T) {
			ca := httptest.NewTLSServer(h)
			defer ca.Close()
			root := filepath.Join(t.TempDir(), "root.pem")
			os.WriteFile(root, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate().Raw}), 0o600)
			var logs tu.SyncBuffer
			reg := prometheus.NewRegistry()
			cfg := &Config{Certificates: []Certificate{{Cert: cp, Key: kp}},
				ACME: &ACME{Directory: ca.URL + "/directory", CARoot: root, Domains: []string{"hostile.switchyard.test"},
					Challenges: []string{HTTP01}, Storage: t.TempDir()}}
			cs, err := Open(cfg, Options{Metrics: NewMetrics(reg), Log: slog.New(slog.NewTextHandler(&logs, nil))}, "http/1.1")
			if err != nil {
				t.Fatal(err)
			}
			httpAddr, tlsAddr := tu.FreeAddr(t), tu.FreeAddr(t)
			serveACME(t, cs, httpAddr, tlsAddr)
			if err := cs.Manage(httpAddr, tlsAddr); err != nil {
				t.Fatalf("Manage failed on a hostile CA: %v (the listener must start)", err)
			}
			tu.Eventually(t, 20*time.Second, func() bool {
				return tu.Counter(t, reg, "switchyard_tls_acme_failures_total", "op", "obtain") >= 1 &&
					strings.Contains(logs.String(), "next_retry=")
			}, "no failure counted and logged with its next retry; log:\n%s", func() any { return logs.String() })
			if _, err := tu.LeafCert(tlsAddr, "files.test", fileRoots); err != nil {
				t.Fatalf("the file certificate is not served beside the failing order: %v", err)
			}
			done := make(chan struct{})
			go func() { cs.Close(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Close hung on the hostile CA")
			}
		})
	}
}
