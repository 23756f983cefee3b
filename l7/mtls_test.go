package l7

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
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
