package l7

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/switchyard/switchyard/internal/testutil"
)

// freeTCPUDPPort returns a loopback port free on both TCP and UDP just now.
func freeTCPUDPPort(t *testing.T) int {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		uc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		ln.Close()
		if err == nil {
			uc.Close()
			return port
		}
	}
	t.Fatal("no port free on both TCP and UDP")
	return 0
}

// TestHTTP3Listener: a TLS listener with http3 serves HTTP/3 on the same port over UDP through
// the routes, and every TCP response (HTTP/1.1 on the goroutine engine and on the event loops,
// HTTP/2) advertises it with Alt-Svc.
func TestHTTP3Listener(t *testing.T) {
	b := startBackend(t, "b1", nil)
	cp, kp, cert := testutil.WriteCert(t, t.TempDir(), "proxy.test")
	port := freeTCPUDPPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
listeners: [{address: %q, http3: true, tls: {certificates: [{cert: %q, key: %q}]}}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, addr, cp, kp, b.addr)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	tc := &tls.Config{RootCAs: pool, ServerName: "proxy.test"}
	h3 := &http3.Transport{TLSClientConfig: tc.Clone()}
	t.Cleanup(func() { h3.Close() })
	h1 := &http.Transport{TLSClientConfig: tc.Clone(), Protocols: new(http.Protocols)}
	h1.Protocols.SetHTTP1(true)
	h2 := &http.Transport{TLSClientConfig: tc.Clone(), Protocols: new(http.Protocols)}
	h2.Protocols.SetHTTP2(true)
	t.Cleanup(func() { h1.CloseIdleConnections(); h2.CloseIdleConnections() })
	base := "https://" + addr
	wantAlt := fmt.Sprintf(`h3=":%d"`, port)
	for name, c := range map[string]http.RoundTripper{"h3": h3, "h1": h1, "h2": h2} {
		for i := range 3 { // on HTTP/1.1: the goroutine engine first, then the event loops
			resp, body := get(t, &http.Client{Transport: c, Timeout: 10 * time.Second}, "GET", fmt.Sprintf("%s/x/%d", base, i), nil)
			if want := fmt.Sprintf("b1 GET /x/%d body=0", i); resp.StatusCode != 200 || body != want {
				t.Fatalf("%s request %d: %d %q, want %q", name, i, resp.StatusCode, body, want)
			}
			if name == "h3" && resp.Proto != "HTTP/3.0" {
				t.Fatalf("h3 client served as %s", resp.Proto)
			}
			if alt := resp.Header.Get("Alt-Svc"); name != "h3" && !strings.HasPrefix(alt, wantAlt) {
				t.Errorf("%s request %d: Alt-Svc %q, want %s...", name, i, alt, wantAlt)
			}
		}
	}
}

// TestHTTP3NeedsTLS: http3 on a plain listener is refused, naming the fix.
func TestHTTP3NeedsTLS(t *testing.T) {
	_, err := ParseConfig([]byte(`
listeners: [{address: "127.0.0.1:0", http3: true}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: "127.0.0.1:1"}]}]
`))
	if err == nil || !strings.Contains(err.Error(), "listeners[0].http3") || !strings.Contains(err.Error(), "add tls:") {
		t.Fatalf("got %v, want an error on listeners[0].http3 naming tls", err)
	}
}
