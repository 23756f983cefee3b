package l7

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// A listener with client_auth passes the verified client certificate's subject upstream in its
// header, on HTTP/1.1 (first request on the goroutine engine, the next on a loop) and on HTTP/2,
// and never a client's own copy of that header; require refuses a client without a
// certificate, request lets it through without the header.
func TestClientCertificates(t *testing.T) {
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Echo-Subject"] = r.Header.Values("X-Client-Cert-Subject")
	}))
	dir := t.TempDir()
	cp, kp, _ := testutil.WriteCert(t, dir, "proxy.test")
	caFile, pair := testutil.WriteClientCert(t, dir, "alice")
	const subject = "CN=alice,O=switchyard tests"
	for _, mode := range []string{"require", "request"} {
		s, _ := startProxy(t, fmt.Sprintf(`
listeners:
  - address: "127.0.0.1:0"
    tls: {certificates: [{cert: %q, key: %q}], client_auth: {mode: %s, ca_file: %q}}
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, cp, kp, mode, caFile, b.addr))
		lc := s.Config().Listeners[0].TLS
		tc, err := tlsconf.Load(lc)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go s.serveTLS(ln, tc, nil, lc.SubjectHeader())
		for _, proto := range []string{"http/1.1", "h2"} {
			for _, withCert := range []bool{true, false} {
				cfg := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // test certificate
				if withCert {
					cfg.Certificates = []tls.Certificate{pair}
				}
				tr := &http.Transport{TLSClientConfig: cfg, Protocols: new(http.Protocols)}
				if proto == "h2" {
					tr.Protocols.SetHTTP2(true)
				} else {
					tr.Protocols.SetHTTP1(true)
				}
				client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
				for i := range 2 { // the second HTTP/1.1 request is a loop's
					req, _ := http.NewRequest("GET", "https://"+ln.Addr().String()+"/x", nil)
					req.Header.Set("X-Client-Cert-Subject", "CN=mallory")
					resp, err := client.Do(req)
					want := subject
					if !withCert {
						want = ""
					}
					switch {
					case mode == "require" && !withCert:
						if err == nil {
							resp.Body.Close()
							t.Errorf("%s %s: served a client without a certificate", mode, proto)
						}
					case err != nil:
						t.Fatalf("%s %s cert %v: %v", mode, proto, withCert, err)
					default:
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if got := resp.Header.Get("Echo-Subject"); got != want || len(resp.Header.Values("Echo-Subject")) > 1 {
							t.Errorf("%s %s cert %v request %d: backend saw subject %q, want %q", mode, proto, withCert, i, resp.Header.Values("Echo-Subject"), want)
						}
					}
				}
				tr.CloseIdleConnections()
			}
		}
	}
}

// A pool's tls: (HTTP/2, or HTTP/1.1 over TLS on every engine) pins the roots that verify the backend (ca_file, server_name) and presents a
// client certificate: a backend that requires one answers; without it, or against a backend
// the roots do not verify, the exchange fails (502), never silently unverified.
func TestUpstreamMutualTLS(t *testing.T) {
	dir := t.TempDir()
	srvCert, srvKey, _ := testutil.WriteCert(t, dir, "backend.test")
	otherCert, _, _ := testutil.WriteCert(t, dir, "other.test")
	clientPEM, clientPair := testutil.WriteClientCert(t, dir, "proxy")
	keyPEM := filepath.Join(dir, "proxy-client.key")
	kb, _ := x509.MarshalECPrivateKey(clientPair.PrivateKey.(*ecdsa.PrivateKey))
	os.WriteFile(keyPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	pair, err := tls.LoadX509KeyPair(srvCert, srvKey)
	if err != nil {
		t.Fatal(err)
	}
	clients := x509.NewCertPool()
	clients.AppendCertsFromPEM(must(os.ReadFile(clientPEM)))
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Echo-Peer", r.TLS.PeerCertificates[0].Subject.CommonName)
		w.Header().Set("Echo-Proto", r.Proto)
	}))
	backend.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients}
	backend.EnableHTTP2 = true
	backend.StartTLS()
	defer backend.Close()
	addr := strings.TrimPrefix(backend.URL, "https://")
	cases := []struct {
		tls  string
		want int
	}{
		{fmt.Sprintf("{ca_file: %q, server_name: backend.test, cert: %q, key: %q}", srvCert, clientPEM, keyPEM), 200},
		{fmt.Sprintf("{ca_file: %q, server_name: backend.test}", srvCert), 502},                                         // no client certificate
		{fmt.Sprintf("{ca_file: %q, server_name: backend.test, cert: %q, key: %q}", otherCert, clientPEM, keyPEM), 502}, // roots that do not verify it
	}
	check := func(t *testing.T, base, proto, tlsConf string, want int, client *http.Client) {
		t.Helper()
		resp, err := client.Get(base + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || (want == 200 && (resp.Header.Get("Echo-Peer") != "proxy" || resp.Header.Get("Echo-Proto") != proto)) {
			t.Errorf("tls %s: %s, peer %q over %q; want %d over %s", tlsConf, resp.Status, resp.Header.Get("Echo-Peer"), resp.Header.Get("Echo-Proto"), want, proto)
		}
	}
	for _, c := range cases {
		_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, protocol: h2, tls: %s, backends: [{address: %q}]}]
`, c.tls, addr))
		check(t, base, "HTTP/2.0", c.tls, c.want, testClient)
	}
	// HTTP/1.1 over TLS (an http1 pool with tls:), on every engine.
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		for _, c := range cases {
			p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, tls: %s, backends: [{address: %q}]}]
`, c.tls, e.backend(addr)))
			client := testClient
			if e.h2 {
				client = h2Client(p.base())
			}
			check(t, p.base(), "HTTP/1.1", c.tls, c.want, client)
		}
	})
	_, err = ParseConfig([]byte("listeners: [{address: \"127.0.0.1:0\"}]\nroutes: [{name: r, pool: p}]\npools: [{name: p, protocol: h2c, tls: {cert: a}, backends: [{address: \"127.0.0.1:1\"}]}]\n"))
	if err == nil || !strings.Contains(err.Error(), "pools[0].tls: h2c is HTTP/2 in cleartext") {
		t.Errorf("tls on an h2c pool: %v", err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
