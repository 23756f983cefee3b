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
	"sync"
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
	port := freeTCPUDPPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cert := startHTTP3Proxy(t, addr, "")
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

// startHTTP3Proxy runs a proxy with one TLS and HTTP/3 listener on addr (extra: more of its
// fields) in front of a backend b1, and returns the certificate its clients trust (proxy.test).
func startHTTP3Proxy(t *testing.T, addr, extra string) *x509.Certificate {
	t.Helper()
	b := startBackend(t, "b1", nil)
	cp, kp, cert := testutil.WriteCert(t, t.TempDir(), "proxy.test")
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
listeners: [{address: %q, http3: true, %stls: {certificates: [{cert: %q, key: %q}]}}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, addr, extra, cp, kp, b.addr)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Listen(); err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return cert
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

// TestHTTP3QUICLBConnectionIDs: a listener with quic_lb issues HTTP/3 connection IDs that carry
// its server ID and config rotation bits where the balancer reads them (internal/quiclb): every
// short-header packet the client sends, seen by a relay in front of the listener, names the
// server. quic-go's own random IDs name none.
func TestHTTP3QUICLBConnectionIDs(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", freeTCPUDPPort(t))
	cert := startHTTP3Proxy(t, addr, "quic_lb: {server_id: 515, config_id: 2}, ")
	relayAddr, dcids := udpRelay(t, addr)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	h3 := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "proxy.test"}}
	t.Cleanup(func() { h3.Close() })
	for i := range 3 {
		resp, body := get(t, &http.Client{Transport: h3, Timeout: 10 * time.Second}, "GET", fmt.Sprintf("https://%s/x/%d", relayAddr, i), nil)
		if resp.StatusCode != 200 || resp.Proto != "HTTP/3.0" {
			t.Fatalf("request %d: %d %s %q", i, resp.StatusCode, resp.Proto, body)
		}
	}
	ids := dcids()
	if len(ids) == 0 {
		t.Fatal("the relay saw no short-header packet")
	}
	for _, id := range ids {
		if id[0]>>5 != 2 || id[1] != 515>>8 || id[2] != 515&0xff {
			t.Fatalf("short-header DCID %x does not carry config 2 and server 515 (0x0203)", id)
		}
	}
}

// udpRelay forwards datagrams between one client and the server at to; it returns the address
// the client is to send to, and a function listing the first three bytes of each short-header
// packet's destination connection ID the client sent.
func udpRelay(t *testing.T, to string) (string, func() [][3]byte) {
	t.Helper()
	front, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	back, err := net.Dial("udp", to)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { front.Close(); back.Close() })
	var mu sync.Mutex
	var ids [][3]byte
	client := make(chan net.Addr, 1)
	go func() {
		buf := make([]byte, 2048)
		for first := true; ; first = false {
			n, from, err := front.ReadFrom(buf)
			if err != nil {
				return
			}
			if first {
				client <- from
			}
			if n > 4 && buf[0]&0x80 == 0 { // short header: the DCID starts at byte 1
				mu.Lock()
				ids = append(ids, [3]byte{buf[1], buf[2], buf[3]})
				mu.Unlock()
			}
			back.Write(buf[:n])
		}
	}()
	go func() {
		buf := make([]byte, 2048)
		var to net.Addr
		for {
			n, err := back.Read(buf)
			if err != nil {
				return
			}
			if to == nil {
				to = <-client
			}
			front.WriteTo(buf[:n], to)
		}
	}()
	return front.LocalAddr().String(), func() [][3]byte {
		mu.Lock()
		defer mu.Unlock()
		return append([][3]byte(nil), ids...)
	}
}

// TestQUICLBNeedsHTTP3: quic_lb names HTTP/3 connections, so it needs http3; its ranges are the
// balancer's.
func TestQUICLBNeedsHTTP3(t *testing.T) {
	for body, want := range map[string]string{
		`quic_lb: {server_id: 1}, tls: {certificates: [{cert: a, key: b}]}`:              "listeners[0].quic_lb: names HTTP/3 connections: add http3: true",
		`http3: true, quic_lb: {server_id: 0}, tls: {certificates: [{cert: a, key: b}]}`: "listeners[0].quic_lb: server_id 0 out of range",
	} {
		_, err := ParseConfig([]byte(fmt.Sprintf("listeners: [{address: \"127.0.0.1:0\", %s}]\nroutes: [{name: r, pool: p}]\npools: [{name: p, backends: [{address: \"127.0.0.1:1\"}]}]\n", body)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
