package l7

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

func TestH2CDownstreamAndUpstream(t *testing.T) {
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream-Proto", r.Proto)
	}))
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, protocol: h2c, backends: [{address: %q}]}]
`, b.addr))
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	resp, _ := get(t, &http.Client{Transport: tr}, "GET", base+"/x", nil)
	if resp.Proto != "HTTP/2.0" || resp.Header.Get("X-Upstream-Proto") != "HTTP/2.0" {
		t.Errorf("client saw %s, backend saw %s; want HTTP/2.0 on both legs", resp.Proto, resp.Header.Get("X-Upstream-Proto"))
	}
}

func TestTLSTerminationWithSNIAndH2(t *testing.T) {
	dir := t.TempDir()
	ac, ak, acert := testutil.WriteCert(t, dir, "a.example")
	bc, bk, bcert := testutil.WriteCert(t, dir, "b.example")
	b := startBackend(t, "b", nil)
	s, _ := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0", tls: {certificates: [{cert: %q, key: %q}, {cert: %q, key: %q}]}}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, ac, ak, bc, bk, b.addr))
	tc, err := tlsconf.Load(s.Config().Listeners[0].TLS)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.ServeTLS(ln, tc)
	pool := x509.NewCertPool()
	pool.AddCert(acert)
	pool.AddCert(bcert)
	before := s.served.core()
	for _, tcase := range []struct {
		name string
		h2   bool
	}{{"a.example", true}, {"b.example", false}} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: tcase.name}, Protocols: new(http.Protocols)}
		if tcase.h2 {
			tr.Protocols.SetHTTP2(true)
		} else {
			tr.Protocols.SetHTTP1(true)
		}
		resp, _ := get(t, &http.Client{Transport: tr}, "GET", "https://"+ln.Addr().String()+"/x", nil)
		tr.CloseIdleConnections()
		if got := resp.TLS.PeerCertificates[0].Subject.CommonName; got != tcase.name {
			t.Errorf("SNI %s got certificate %s", tcase.name, got)
		}
		if tcase.h2 != (resp.ProtoMajor == 2) {
			t.Errorf("SNI %s proto %s, want h2=%v", tcase.name, resp.Proto, tcase.h2)
		}
		if resp.Header.Get("X-Seen-X-Forwarded-Proto") != "https" {
			t.Errorf("X-Forwarded-Proto = %q over TLS", resp.Header.Get("X-Seen-X-Forwarded-Proto"))
		}
	}
	// HTTP/1.1 over TLS takes the goroutine engine, HTTP/2 the h2 engine: both the request core.
	if got := s.served.core() - before; got != 2 {
		t.Errorf("the request core served %d TLS requests, want 2 (HTTP/1.1 and HTTP/2)", got)
	}
}

func TestRedirectToHTTPS(t *testing.T) {
	rec := httptest.NewRecorder()
	redirectHandler(8443).ServeHTTP(rec, httptest.NewRequest("GET", "http://app.example:8080/a?b=1", nil))
	if rec.Code != 308 || rec.Header().Get("Location") != "https://app.example:8443/a?b=1" {
		t.Errorf("redirect = %d %q", rec.Code, rec.Header().Get("Location"))
	}
}

// WebSocket-style upgrade: the proxy passes the 101 and then relays raw bytes both ways.
func TestUpgradePassThrough(t *testing.T) {
	b := startBackend(t, "ws", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want upgrade", 400)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprint(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		fmt.Fprint(brw, "echo:"+line)
		brw.Flush()
	}))
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade response %v %v", resp, err)
	}
	fmt.Fprint(c, "hello\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo:hello\n" {
		t.Errorf("relayed %q %v, want echo:hello", line, err)
	}
}

// Bodies stream both ways: the backend sees the first upload chunk and answers before the client
// has finished sending, and the client reads response chunks as they are flushed.
func TestStreamingBodiesBothWays(t *testing.T) {
	b := startBackend(t, "s", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		rc.EnableFullDuplex()
		w.WriteHeader(200)
		rc.Flush()
		br := bufio.NewReader(r.Body)
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			fmt.Fprint(w, "got:"+line)
			rc.Flush()
		}
	}))
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", base+"/stream", pr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req = req.WithContext(ctx)
	respc := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			close(respc)
			return
		}
		respc <- resp
	}()
	fmt.Fprint(pw, "one\n")
	resp := <-respc
	if resp == nil {
		t.FailNow()
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "got:one\n" {
		t.Fatalf("first streamed line %q", line)
	}
	fmt.Fprint(pw, "two\n")
	if line, _ := br.ReadString('\n'); line != "got:two\n" {
		t.Fatalf("second streamed line %q", line)
	}
	pw.Close()
}

func TestH2UpstreamOverTLS(t *testing.T) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream-Proto", r.Proto)
		w.Header().Set("X-Upstream-TLS", fmt.Sprint(r.TLS != nil))
	}))
	ts.EnableHTTP2 = true
	ts.StartTLS()
	defer ts.Close()
	_, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, protocol: h2, insecure_skip_verify: true, backends: [{address: %q}]}]
`, strings.TrimPrefix(ts.URL, "https://")))
	resp, _ := get(t, http.DefaultClient, "GET", base+"/x", nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Upstream-Proto") != "HTTP/2.0" || resp.Header.Get("X-Upstream-TLS") != "true" {
		t.Errorf("upstream saw %s tls=%s (status %d), want HTTP/2.0 over TLS", resp.Header.Get("X-Upstream-Proto"), resp.Header.Get("X-Upstream-TLS"), resp.StatusCode)
	}
}
