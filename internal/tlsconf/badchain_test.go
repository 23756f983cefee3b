package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	tu "github.com/switchyard/switchyard/internal/testutil"
)

// Chains the bad-chain CA returns.
const (
	chainGood      = iota // the leaf for the request's key and names, signed by the CA
	chainOtherKey         // a well-signed leaf for a key that is not the request's
	chainNotSigned        // the leaf for the request's key, signed by a key the chain does not hold
	chainWrongName        // a well-signed leaf for the request's key and another name
)

// badChainCA is a minimal ACME server (RFC 8555: directory, nonces, account, order, an
// authorization that is already valid, finalize, certificate) that issues a chain of the kind
// its mode says. No real CA does so on purpose; a broken or compromised one could.
type badChainCA struct {
	*httptest.Server
	mode     atomic.Int32
	key      *ecdsa.PrivateKey
	root     *x509.Certificate
	mu       sync.Mutex
	csr      *x509.CertificateRequest
	good     map[string]bool // serials of the good leaves issued
	lifetime time.Duration   // of a leaf from now; it began an hour ago
}

func newBadChainCA(t *testing.T, lifetime time.Duration) *badChainCA {
	t.Helper()
	ca := &badChainCA{good: map[string]bool{}, lifetime: lifetime}
	ca.key, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bad chain test root"},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature, IsCA: true, BasicConstraintsValid: true}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &ca.key.PublicKey, ca.key)
	ca.root, _ = x509.ParseCertificate(der)
	ca.Server = httptest.NewTLSServer(http.HandlerFunc(ca.serve))
	t.Cleanup(ca.Close)
	return ca
}

func (ca *badChainCA) serve(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Replay-Nonce", base64.RawURLEncoding.EncodeToString(big.NewInt(time.Now().UnixNano()).Bytes()))
	w.Header().Set("Cache-Control", "no-store")
	obj := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	u := ca.URL
	switch p := r.URL.Path; {
	case p == "/directory":
		obj(200, map[string]string{"newNonce": u + "/nonce", "newAccount": u + "/account", "newOrder": u + "/order",
			"revokeCert": u + "/revoke", "keyChange": u + "/keychange"})
	case p == "/nonce":
		w.WriteHeader(http.StatusOK)
	case strings.HasPrefix(p, "/account") || strings.HasPrefix(p, "/acct/"):
		w.Header().Set("Location", u+"/acct/1")
		obj(200, map[string]any{"status": "valid", "orders": u + "/orders/1"})
	case p == "/order" || p == "/order/1":
		w.Header().Set("Location", u+"/order/1")
		obj(201, ca.order("ready"))
	case p == "/authz/1":
		obj(200, map[string]any{"status": "valid", "identifier": ca.identifiers()[0], "challenges": []any{}})
	case p == "/finalize/1":
		if err := ca.finalize(r.Body); err != nil {
			obj(400, map[string]string{"type": "urn:ietf:params:acme:error:badCSR", "detail": err.Error()})
			return
		}
		w.Header().Set("Location", u+"/order/1")
		obj(200, ca.order("valid"))
	case p == "/cert/1":
		w.Header().Set("Content-Type", "application/pem-certificate-chain")
		w.Write(ca.chain())
	default:
		obj(404, map[string]string{"type": "urn:ietf:params:acme:error:malformed", "detail": "no " + p})
	}
}

// identifiers are the order's: the names of the last request, or the test's name before one.
func (ca *badChainCA) identifiers() []map[string]string {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	name := "bad.switchyard.test"
	if ca.csr != nil {
		name = ca.csr.DNSNames[0]
	}
	return []map[string]string{{"type": "dns", "value": name}}
}

func (ca *badChainCA) order(status string) map[string]any {
	return map[string]any{"status": status, "identifiers": ca.identifiers(), "authorizations": []string{ca.URL + "/authz/1"},
		"finalize": ca.URL + "/finalize/1", "certificate": ca.URL + "/cert/1"}
}

// finalize reads the CSR out of the JWS (its signature is not checked: this CA trusts anyone).
func (ca *badChainCA) finalize(body io.Reader) error {
	var jws struct{ Payload string }
	if err := json.NewDecoder(body).Decode(&jws); err != nil {
		return err
	}
	raw, err := base64.RawURLEncoding.DecodeString(jws.Payload)
	if err != nil {
		return err
	}
	var req struct{ CSR string }
	if err := json.Unmarshal(raw, &req); err != nil {
		return err
	}
	der, err := base64.RawURLEncoding.DecodeString(req.CSR)
	if err != nil {
		return err
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return err
	}
	ca.mu.Lock()
	ca.csr = csr
	ca.mu.Unlock()
	return nil
}

// chain issues for the last request, as the mode says: the leaf, then the root.
func (ca *badChainCA) chain() []byte {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	mode := ca.mode.Load()
	pub, parent, signer, names := any(ca.csr.PublicKey), ca.root, ca.key, ca.csr.DNSNames
	switch mode {
	case chainOtherKey:
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		pub = &k.PublicKey
	case chainNotSigned: // an impostor of the root: its name, another key
		signer, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		imp := *ca.root
		imp.PublicKey = &signer.PublicKey
		parent = &imp
	case chainWrongName:
		names = []string{"other.switchyard.test"}
	}
	serial := big.NewInt(time.Now().UnixNano())
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(ca.lifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		panic(err)
	}
	if mode == chainGood {
		ca.good[serial.String()] = true
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.root.Raw})...)
}

func (ca *badChainCA) isGood(serial *big.Int) bool {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	return ca.good[serial.String()]
}

// openBadChain opens an ACME listener on ca for bad.switchyard.test beside a file certificate
// for files.test, and serves it.
func openBadChain(t *testing.T, ca *badChainCA, storage string) (reg *prometheus.Registry, logs *tu.SyncBuffer, tlsAddr string, fileRoots *x509.CertPool) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root.pem")
	os.WriteFile(root, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate().Raw}), 0o600)
	cp, kp, fileCert := tu.WriteCert(t, t.TempDir(), "files.test")
	fileRoots = x509.NewCertPool()
	fileRoots.AddCert(fileCert)
	logs, reg = &tu.SyncBuffer{}, prometheus.NewRegistry()
	cfg := &Config{Certificates: []Certificate{{Cert: cp, Key: kp}},
		ACME: &ACME{Directory: ca.URL + "/directory", CARoot: root, Domains: []string{"bad.switchyard.test"},
			Challenges: []string{HTTP01}, Storage: storage}}
	cs, err := Open(cfg, Options{Metrics: NewMetrics(reg), Log: slog.New(slog.NewTextHandler(logs, nil))}, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cs.Close)
	httpAddr := tu.FreeAddr(t)
	tlsAddr = tu.FreeAddr(t)
	serveACME(t, cs, httpAddr, tlsAddr)
	if err := cs.Manage(httpAddr, tlsAddr); err != nil {
		t.Fatal(err)
	}
	return reg, logs, tlsAddr, fileRoots
}

// storedLeaf is the certificate storage holds for bad.switchyard.test (nil: none).
func storedLeaf(t *testing.T, storage string) *x509.Certificate {
	t.Helper()
	var leaf *x509.Certificate
	filepath.WalkDir(storage, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, "bad.switchyard.test.crt") {
			b, _ := os.ReadFile(p)
			if blk, _ := pem.Decode(b); blk != nil {
				leaf, _ = x509.ParseCertificate(blk.Bytes)
			}
		}
		return nil
	})
	return leaf
}

// TestACMEBadChain: a CA whose chain is for another key, does not verify or names another host
// fails the order, which is counted and logged with the reason, stores nothing and serves
// nothing for the name, while the file certificate goes on serving.
func TestACMEBadChain(t *testing.T) {
	for name, mode := range map[string]int32{"leaf for another key": chainOtherKey, "chain does not verify": chainNotSigned,
		"leaf for another name": chainWrongName} {
		t.Run(name, func(t *testing.T) {
			ca := newBadChainCA(t, 24*time.Hour)
			ca.mode.Store(mode)
			roots := x509.NewCertPool()
			roots.AddCert(ca.root)
			storage := t.TempDir()
			reg, logs, tlsAddr, fileRoots := openBadChain(t, ca, storage)
			tu.Eventually(t, 20*time.Second, func() bool {
				return tu.Counter(t, reg, "switchyard_tls_acme_failures_total", "op", "obtain") >= 1 &&
					strings.Contains(logs.String(), "acme certificate refused") && strings.Contains(logs.String(), "next_retry=")
			}, "the bad chain was not refused, counted and logged with its retry; log:\n%s", func() any { return logs.String() })
			if n := tu.Counter(t, reg, "switchyard_tls_acme_obtained_total"); n != 0 {
				t.Fatalf("the bad chain counted as obtained (%v)", n)
			}
			if leaf := storedLeaf(t, storage); leaf != nil {
				t.Fatalf("the bad chain was stored: serial %x", leaf.SerialNumber)
			}
			if c, err := tu.LeafCert(tlsAddr, "bad.switchyard.test", roots); err == nil {
				t.Fatalf("a certificate is served for the name: %v", c.Subject)
			}
			if _, err := tu.LeafCert(tlsAddr, "files.test", fileRoots); err != nil {
				t.Fatalf("the file certificate is not served beside the refused order: %v", err)
			}
		})
	}
}

// TestACMEBadChainOnRenewal: a CA that issued a good certificate and then, on its renewal,
// returns a chain that does not verify: the renewal fails, counted and logged, and the good
// certificate goes on serving, in storage too (a restart serves it).
func TestACMEBadChainOnRenewal(t *testing.T) {
	defer func(d time.Duration) { MaintenanceInterval = d }(MaintenanceInterval)
	MaintenanceInterval = 200 * time.Millisecond
	// The leaf began an hour ago and ends in 10 minutes: inside its renewal window at once.
	ca := newBadChainCA(t, 10*time.Minute)
	roots := x509.NewCertPool()
	roots.AddCert(ca.root)
	storage := t.TempDir()
	reg, logs, tlsAddr, _ := openBadChain(t, ca, storage)
	var served *x509.Certificate
	var err error
	tu.Eventually(t, 20*time.Second, func() bool {
		served, err = tu.LeafCert(tlsAddr, "bad.switchyard.test", roots)
		return err == nil
	}, "no good certificate served: %v; log:\n%s", func() any { return err }, func() any { return logs.String() })
	ca.mode.Store(chainNotSigned)
	tu.Eventually(t, 20*time.Second, func() bool {
		return tu.Counter(t, reg, "switchyard_tls_acme_failures_total", "op", "renew") >= 1 && strings.Contains(logs.String(), "acme certificate refused")
	}, "the bad renewal was not refused, counted and logged; log:\n%s", func() any { return logs.String() })
	for range 3 { // across a few more renewal attempts
		served, err = tu.LeafCert(tlsAddr, "bad.switchyard.test", roots)
		if err != nil || !ca.isGood(served.SerialNumber) {
			t.Fatalf("after the refused renewal the listener serves %v (err %v), want a good certificate", served, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if leaf := storedLeaf(t, storage); leaf == nil || !ca.isGood(leaf.SerialNumber) {
		t.Fatalf("storage holds %v, want the good certificate", leaf)
	}
}
