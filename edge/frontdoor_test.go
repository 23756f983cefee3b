package edge

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// frontDoorEdge is an edge with a TLS listener serving HTTP/3 too, and clients of each protocol
// that trust its certificate.
func frontDoorEdge(t *testing.T, origin string) (e *Edge, clients map[string]*http.Client, urls map[string]string) {
	t.Helper()
	cp, kp, cert := testutil.WriteCert(t, t.TempDir(), "edge.test")
	e = newEdge(t, origin, func(c *Config) {
		c.Listen = "127.0.0.1:0"
		c.TLS = &TLSConfig{Listen: "127.0.0.1:0", HTTP3: true}
		c.TLS.Certificates = append(c.TLS.Certificates, tlsCert(cp, kp))
	})
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	tc := &tls.Config{RootCAs: pool, ServerName: "edge.test"}
	h1 := &http.Transport{TLSClientConfig: tc.Clone(), Protocols: new(http.Protocols)}
	h1.Protocols.SetHTTP1(true)
	h2 := &http.Transport{TLSClientConfig: tc.Clone(), Protocols: new(http.Protocols)}
	h2.Protocols.SetHTTP2(true)
	h3 := &http3.Transport{TLSClientConfig: tc.Clone()} // each transport sets its own ALPN list
	h2c := h2cTransport()
	t.Cleanup(func() { h1.CloseIdleConnections(); h2.CloseIdleConnections(); h3.Close(); h2c.CloseIdleConnections() })
	clients = map[string]*http.Client{"plain": http.DefaultClient, "tls": {Transport: h1, Timeout: 10 * time.Second},
		"h2": {Transport: h2, Timeout: 10 * time.Second}, "h3": {Transport: h3, Timeout: 10 * time.Second},
		"h2c": {Transport: h2c, Timeout: 10 * time.Second}}
	tlsURL := "https://" + e.TLSAddr()
	urls = map[string]string{"plain": e.URL(), "tls": tlsURL, "h2": tlsURL, "h3": tlsURL, "h2c": e.URL()}
	return e, clients, urls
}

// TestFrontDoorOneObjectEveryProtocol: one object, asked for at once over plain HTTP/1.1,
// h2c on the plain listener, HTTP/1.1 over TLS, HTTP/2 and HTTP/3, is fetched from the origin once (collapsed across protocols)
// and then served as a HIT on every one; TLS responses advertise HTTP/3 with Alt-Svc.
func TestFrontDoorOneObjectEveryProtocol(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(300 * time.Millisecond) // long enough for every protocol's request to queue
		w.Header().Set("Cache-Control", "max-age=300")
		io.WriteString(w, "one object")
	})
	_, clients, urls := frontDoorEdge(t, o.URL)
	var wg sync.WaitGroup
	for name, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := getAs(c, urls[name]+"/obj")
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "one object" {
				t.Errorf("%s: %d %q", name, resp.StatusCode, body)
			}
		}()
	}
	wg.Wait()
	if n := o.hits("/obj"); n != 1 {
		t.Fatalf("origin asked %d times; want 1 (collapsed across protocols)", n)
	}
	for name, c := range clients {
		resp, err := getAs(c, urls[name]+"/obj")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Cache"); !strings.HasPrefix(got, "HIT") {
			t.Errorf("%s (%s): X-Cache %q, want a HIT", name, resp.Proto, got)
		}
		if want := map[string]string{"plain": "HTTP/1.1", "tls": "HTTP/1.1", "h2": "HTTP/2.0", "h3": "HTTP/3.0", "h2c": "HTTP/2.0"}[name]; resp.Proto != want {
			t.Errorf("%s: served as %s, want %s", name, resp.Proto, want)
		}
		alt := resp.Header.Get("Alt-Svc")
		if (name == "tls" || name == "h2") && !strings.HasPrefix(alt, `h3=":`) {
			t.Errorf("TLS response without Alt-Svc for HTTP/3: %q", alt)
		}
		if (name == "plain" || name == "h2c") && alt != "" {
			t.Errorf("plain HTTP response advertises %q (HTTP/3 is for TLS clients)", alt)
		}
	}
}

// TestTLSHitsOnTheFastPath: HTTP/1.1 keep-alive hits over TLS are answered by the fast path
// (no net/http server, as on the plain listener), each with Alt-Svc, and a request the fast
// path does not read (a POST) still reaches the edge through net/http with its TLS state.
func TestTLSHitsOnTheFastPath(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		io.WriteString(w, r.Method+" "+r.Header.Get("X-Forwarded-Proto"))
	})
	e, clients, urls := frontDoorEdge(t, o.URL)
	c, base := clients["tls"], urls["tls"]
	getAs(c, base+"/hit") // the miss stores it
	before := e.stats.FastPath.Load()
	for i := range 3 {
		resp, err := getAs(c, base+"/hit")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "GET https" || !strings.HasPrefix(resp.Header.Get("X-Cache"), "HIT") {
			t.Fatalf("hit %d: %q, X-Cache %q", i, body, resp.Header.Get("X-Cache"))
		}
		if alt := resp.Header.Get("Alt-Svc"); !strings.HasPrefix(alt, `h3=":`) {
			t.Errorf("hit %d without Alt-Svc for HTTP/3: %q", i, alt)
		}
	}
	if got := e.stats.FastPath.Load() - before; got != 3 {
		t.Errorf("%d of 3 TLS hits answered by the fast path", got)
	}
	resp, err := c.Post(base+"/post", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "POST https" {
		t.Errorf("POST over TLS (net/http's path) reached the origin as %q, want POST https", body)
	}
}

// TestForwardedProtoPerProtocol: the origin learns the scheme the client came over, on every
// path of the edge: plain HTTP/1.1 (the fast path's own miss) and h2c say http; HTTP/1.1 over
// TLS, HTTP/2 and HTTP/3 say https. A client's own X-Forwarded-Proto never reaches the origin.
func TestForwardedProtoPerProtocol(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]string{}
	o := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = strings.Join(r.Header.Values("X-Forwarded-Proto"), ",")
		mu.Unlock()
		w.Header().Set("Cache-Control", "no-store")
	})}
	go o.Serve(ln)
	t.Cleanup(func() { o.Close() })
	_, clients, urls := frontDoorEdge(t, "http://"+ln.Addr().String())
	want := map[string]string{"plain": "http", "h2c": "http", "tls": "https", "h2": "https", "h3": "https"}
	for name, c := range clients {
		req, _ := http.NewRequest(http.MethodGet, urls[name]+"/"+name, nil)
		req.Host = "edge.test"
		req.Header.Set("X-Forwarded-Proto", "evil")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		resp.Body.Close()
		mu.Lock()
		got := seen["/"+name]
		mu.Unlock()
		if got != want[name] {
			t.Errorf("%s (%s): X-Forwarded-Proto at the origin %q, want %q", name, resp.Proto, got, want[name])
		}
	}
}

// h2cTransport speaks HTTP/2 with prior knowledge over plain TCP (h2c).
func h2cTransport() *http.Transport {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return tr
}

// With the fast path off the plain listener still serves h2c clients (prior knowledge) beside
// HTTP/1.1 ones, through the same cache: the second h2c request is a HIT.
func TestH2CWithoutTheFastPath(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		io.WriteString(w, "object")
	})
	e := newEdge(t, o.URL, func(c *Config) { c.DisableFastPath = true })
	c := &http.Client{Transport: h2cTransport(), Timeout: 10 * time.Second}
	for i, want := range []string{"MISS", "HIT"} {
		resp, err := c.Get(e.URL() + "/o")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Proto != "HTTP/2.0" || string(body) != "object" || !strings.HasPrefix(resp.Header.Get("X-Cache"), want) {
			t.Errorf("request %d: %s %q X-Cache %q, want HTTP/2.0 and %s", i, resp.Proto, body, resp.Header.Get("X-Cache"), want)
		}
	}
	resp, err := http.Get(e.URL() + "/o")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Proto != "HTTP/1.1" || !strings.HasPrefix(resp.Header.Get("X-Cache"), "HIT") {
		t.Errorf("HTTP/1.1 beside h2c: %s X-Cache %q", resp.Proto, resp.Header.Get("X-Cache"))
	}
}

// getAs asks for url under the one site name every protocol's client uses (the cache key holds
// the Host, and the listeners' ports differ).
func getAs(c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Host = "edge.test"
	return c.Do(req)
}

// tlsCert is one certificate entry of a TLS listener.
func tlsCert(cert, key string) tlsconf.Certificate { return tlsconf.Certificate{Cert: cert, Key: key} }

// TestFrontDoorConfigErrors: a TLS listener without certificates or a usable address is refused
// with the field and the fix.
func TestFrontDoorConfigErrors(t *testing.T) {
	for name, c := range map[string]*TLSConfig{
		"tls.certificates":    {Listen: "127.0.0.1:0"},
		"tls.listen":          {Listen: "8443"},
		"tls.certificates[0]": {Listen: "127.0.0.1:0"},
	} {
		if name == "tls.certificates[0]" || name == "tls.listen" {
			c.Certificates = append(c.Certificates, tlsCert("a.pem", ""))
			if name == "tls.listen" {
				c.Certificates[0].Key = "a.key"
			}
		}
		cfg := Config{Listen: "127.0.0.1:0", Origin: "http://127.0.0.1:1", TLS: c}
		cfg.ApplyDefaults()
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming %s", name, err, name)
		}
	}
}

// A flood of TLS connections that never finish their handshake does not hold up a real HTTPS
// client; plain HTTP sent to the TLS port is refused and counted
// (switchyard_tls_handshake_failures_total{reason="not_tls"}).
func TestFrontDoorHandshakeFloodAndGarbage(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	e, clients, urls := frontDoorEdge(t, o.URL)
	for range 100 {
		c, err := net.Dial("tcp", e.TLSAddr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	start := time.Now()
	resp, err := getAs(clients["tls"], urls["tls"]+"/during-flood")
	if err != nil {
		t.Fatalf("a real client during the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || time.Since(start) > 2*time.Second {
		t.Fatalf("a real client during the flood: %s after %v", resp.Status, time.Since(start))
	}
	c, err := net.Dial("tcp", e.TLSAddr())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: edge.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	io.Copy(io.Discard, c)
	c.Close()
	testutil.Eventually(t, 3*time.Second, func() bool {
		return testutil.Counter(t, e.Registry(), "switchyard_tls_handshake_failures_total", "reason", "not_tls") == 1
	}, "plain HTTP to the TLS port not counted as not_tls")
}
