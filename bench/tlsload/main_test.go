package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// server starts an HTTPS server on 127.0.0.1:0 with a fresh ECDSA P-256 certificate (as
// bench/l7.sh makes with openssl), answering status; the server keeps Go's default session
// tickets on, so a client that offers a session resumes.
func server(t *testing.T, status int) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench.test"},
		DNSNames: []string{"bench.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		w.Write([]byte("ok"))
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "https://")
}

func run(t *testing.T, addr string, resume bool) *counts {
	t.Helper()
	c, _ := load(options{addr: addr, path: "/", host: "bench.test", conns: 2, dur: 300 * time.Millisecond, timeout: 10 * time.Second, resume: resume})
	t.Log(c.line(300*time.Millisecond, 0))
	return c
}

// Every connection is a full handshake, counted, on TLS 1.3 with X25519 and the ECDSA P-256
// certificate.
func TestFullHandshakes(t *testing.T) {
	c := run(t, server(t, http.StatusOK), false)
	if err := c.verdict(); err != nil {
		t.Fatal(err)
	}
	if c.handshakes.Load() < 2 || c.handshakes.Load() != c.ok.Load() || c.resumed.Load() != 0 {
		t.Fatalf("handshakes %d, ok %d, resumed %d: want one full handshake per request", c.handshakes.Load(), c.ok.Load(), c.resumed.Load())
	}
	if c.version != tls.VersionTLS13 || c.group != tls.X25519 || c.cert != "ECDSA P-256" {
		t.Fatalf("negotiated %s %s %s, want TLS 1.3, X25519, ECDSA P-256", tls.VersionName(c.version), c.group, c.cert)
	}
}

// The resumption check can fail: with a session cache the client resumes and the run is refused.
func TestResumedHandshakesFail(t *testing.T) {
	c := run(t, server(t, http.StatusOK), true)
	if c.resumed.Load() == 0 {
		t.Fatal("no handshake resumed with a session cache: the check could not see resumption")
	}
	if err := c.verdict(); err == nil || !strings.Contains(err.Error(), "resumed") {
		t.Fatalf("verdict %v, want a failure naming the resumed handshakes", err)
	}
}

// A server that answers 500 fails the run.
func TestNon2xxFails(t *testing.T) {
	c := run(t, server(t, http.StatusInternalServerError), false)
	if c.non2xx.Load() == 0 {
		t.Fatal("no 500 counted")
	}
	if err := c.verdict(); err == nil || !strings.Contains(err.Error(), "status 500") {
		t.Fatalf("verdict %v, want a failure naming status 500", err)
	}
}

// A port where nothing listens fails the run with connect errors.
func TestConnectErrorsFail(t *testing.T) {
	addr := server(t, http.StatusOK)
	c := run(t, addr[:strings.LastIndex(addr, ":")]+":1", false)
	if err := c.verdict(); err == nil || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("verdict %v, want a failure naming the connect error", err)
	}
}

// With -close-notify every connection still makes one full handshake and a good request.
func TestCloseNotify(t *testing.T) {
	c, _ := load(options{addr: server(t, http.StatusOK), path: "/", host: "bench.test", conns: 2, dur: 200 * time.Millisecond, timeout: 10 * time.Second, closeNotify: true})
	if err := c.verdict(); err != nil {
		t.Fatal(err)
	}
}
