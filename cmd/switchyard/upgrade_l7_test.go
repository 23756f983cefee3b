package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// selfSigned writes a certificate for 127.0.0.1 and returns the cert and key paths and a pool
// trusting it.
func selfSigned(t *testing.T, dir string) (string, string, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	cp, kp := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cp, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(kp, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return cp, kp, pool
}

// Every L7 engine hands over: HTTP/1.1 on the event loops, HTTP/1.1 over TLS, HTTP/2 over TLS and
// h2c, each under load with keep-alive connections, and a slow request in flight on each at the
// upgrade finishes on the old process.
func testUpgradeL7Engines(t *testing.T, built string) {
	if testing.Short() {
		t.Skip("load across an upgrade; not in -short")
	}
	dir := t.TempDir()
	bin := copyBinary(t, built, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			time.Sleep(1500 * time.Millisecond)
		}
		fmt.Fprint(w, "ok "+r.Proto)
	})}
	go backend.Serve(ln)
	t.Cleanup(func() { backend.Close() })
	plain, tlsAddr, h2c := freeAddr(t), freeAddr(t), freeAddr(t)
	cp, kp, pool := selfSigned(t, dir)
	cfg := filepath.Join(dir, "l7.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`listeners:
  - {address: %q}
  - {address: %q, tls: {certificates: [{cert: %q, key: %q}]}}
  - {address: %q, h2c: true}
routes: [{name: all, pool: app}]
pools: [{name: app, backends: [{address: %q}]}]
`, plain, tlsAddr, cp, kp, h2c, ln.Addr())), 0o600)
	p := startStopProc(t, bin, dir, "l7", "--config", cfg)
	for range 3 {
		p.waitLog(t, `"l7 listening"`)
	}
	h1tls := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	h2tls := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
	h2ct := &http.Transport{Protocols: new(http.Protocols)}
	h2ct.Protocols.SetUnencryptedHTTP2(true)
	clients := []struct {
		name, url, proto string
		c                *http.Client
	}{
		{"http/1.1 (event loops)", "http://" + plain, "HTTP/1.1", &http.Client{Timeout: 10 * time.Second}},
		{"http/1.1 over tls", "https://" + tlsAddr, "HTTP/1.1", &http.Client{Timeout: 10 * time.Second, Transport: h1tls}},
		{"h2 over tls", "https://" + tlsAddr, "HTTP/2.0", &http.Client{Timeout: 10 * time.Second, Transport: h2tls}},
		{"h2c", "http://" + h2c, "HTTP/2.0", &http.Client{Timeout: 10 * time.Second, Transport: h2ct}},
	}
	const n, rate = 500, 100
	loads := make([]*load, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		loads[i] = &load{name: c.name}
		wg.Add(1)
		go func() {
			defer wg.Done()
			loads[i].run(n, rate, func(j int) error {
				resp, err := c.c.Get(fmt.Sprintf("%s/r/%d", c.url, j))
				if err != nil {
					return err
				}
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.Proto != c.proto {
					return fmt.Errorf("status %d over %s; want 200 over %s", resp.StatusCode, resp.Proto, c.proto)
				}
				return nil
			})
		}()
	}
	for loads[0].sent.Load() < 150 {
		time.Sleep(10 * time.Millisecond)
	}
	slow := make(chan error, len(clients))
	for _, c := range clients {
		go func() { slow <- httpGet(c.c, c.url+"/slow", "ok ") }()
	}
	time.Sleep(200 * time.Millisecond) // the slow requests reach the old process
	if _, out, err := upgradeStop(t, bin, "l7", p.ctl); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for range clients {
		if err := <-slow; err != nil {
			t.Errorf("a request in flight at the upgrade failed: %v", err)
		}
	}
	select {
	case <-p.done:
		err := p.err
		if err != nil {
			t.Errorf("the old l7 ended with %v; want a clean exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the old l7 did not exit within 30 s of the upgrade")
	}
	wg.Wait()
	for _, l := range loads {
		t.Logf("%s: %d sent, %d failed", l.name, l.sent.Load(), l.fail.Load())
		if l.sent.Load() != n || l.fail.Load() != 0 {
			t.Errorf("%s: %d of %d requests failed across the upgrade: %s", l.name, l.fail.Load(), l.sent.Load(), strings.Join(l.errs, "; "))
		}
	}
}
