package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/switchyard/switchyard/bench/loadstat"
)

// server starts an HTTP/3 server on a loopback UDP port with a fresh ECDSA P-256 certificate
// (as bench/edge.sh makes with openssl), answering status with a body of size bytes.
func server(t *testing.T, status, size int) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench.test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(strings.Repeat("s", size))
	srv := &http3.Server{
		TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			w.Write(body)
		}),
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(pc)
	t.Cleanup(func() { srv.Close(); pc.Close() })
	return "https://" + pc.LocalAddr().String() + "/small"
}

func run(t *testing.T, url string, size int64) (*loadstat.Run, *state) {
	t.Helper()
	r, st := load(options{url: url, size: size, Options: loadstat.Options{Conns: 2, Concurrency: 4,
		Duration: 300 * time.Millisecond, Requests: 1_000_000, Timeout: 5 * time.Second}})
	t.Log(r.Line(st.fields()...))
	return r, st
}

// Every answer is HTTP/3 with the right length; the run is good and reports what it negotiated.
func TestGood(t *testing.T) {
	r, st := run(t, server(t, http.StatusOK, 480), 480)
	if err := r.Verdict(); err != nil {
		t.Fatal(err)
	}
	if st.proto != "HTTP/3.0" || st.version != "TLS1.3" || st.group != "X25519" {
		t.Fatalf("negotiated %v, want HTTP/3.0 over TLS 1.3 with X25519", st.fields())
	}
	if !strings.Contains(r.Line(), " bad=0 errors=0 timeouts=0 ") {
		t.Fatalf("line %q", r.Line())
	}
}

// A status other than 200 fails the run.
func TestNon200Fails(t *testing.T) {
	r, _ := run(t, server(t, http.StatusNotFound, 480), 480)
	if err := r.Verdict(); err == nil || !strings.Contains(err.Error(), "status 404") {
		t.Fatalf("verdict %v, want a failure naming status 404", err)
	}
}

// A body of another length fails the run.
func TestWrongLengthFails(t *testing.T) {
	r, _ := run(t, server(t, http.StatusOK, 100), 480)
	if err := r.Verdict(); err == nil || !strings.Contains(err.Error(), "body of 100 bytes, want 480") {
		t.Fatalf("verdict %v, want a failure naming the body length", err)
	}
}

// Nothing listening: every connection fails, and the run with it (within the timeout).
func TestNoServerFails(t *testing.T) {
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	r, _ := load(options{url: "https://" + addr + "/", size: -1, Options: loadstat.Options{Conns: 1, Concurrency: 1,
		Duration: 100 * time.Millisecond, Requests: 10, Timeout: time.Second}})
	if r.Verdict() == nil {
		t.Fatal("a run against no server passed")
	}
}

// The request budget bounds the run even when the window is long.
func TestRequestBudget(t *testing.T) {
	r, _ := load(options{url: server(t, http.StatusOK, 10), size: 10, Options: loadstat.Options{Conns: 2, Concurrency: 2,
		Duration: time.Minute, Requests: 50, Timeout: 5 * time.Second}})
	if err := r.Verdict(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Line(), "requests=50 ok=50 ") {
		t.Fatalf("line %q, want exactly 50 requests", r.Line())
	}
}
