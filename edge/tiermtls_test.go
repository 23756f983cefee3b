package edge

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// upperRoleRequests is what e counted in its upper role (requests whose tier marker it
// honoured), over every origin.
func upperRoleRequests(e *Edge) int64 {
	var n int64
	for _, st := range e.OriginStats() {
		n += st.Upper.Requests
	}
	return n
}

// TestTierMutualTLS: an upper tier with tiers.client_ca_file honours the marker of a lower tier
// that presents a certificate of that authority over TLS (tiers.client_cert), and not the same
// token from a lower tier with another authority's certificate, with none, or over its plain
// listener (net/http and the fast path); browsers without certificates are still served over
// TLS.
func TestTierMutualTLS(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "o")
	})
	dir := t.TempDir()
	srvCert, srvKey, srvParsed := testutil.WriteCert(t, dir, "127.0.0.1")
	lowerCA, _ := testutil.WriteClientCert(t, dir, "lower")
	testutil.WriteClientCert(t, dir, "intruder")
	upper := newEdge(t, o.URL, func(c *Config) {
		c.TLS = &TLSConfig{Listen: "127.0.0.1:0"}
		c.TLS.Certificates = append(c.TLS.Certificates, tlsCert(srvCert, srvKey))
		c.Tiers.ClientCAFile = lowerCA
	})
	upperURL := "https://" + upper.TLSAddr()
	lowerEdge := func(cn string) *Edge {
		return newEdge(t, o.URL, func(c *Config) {
			c.Tiers.Upper, c.Tiers.CAFile = []string{upperURL}, srvCert
			if cn != "" {
				c.Tiers.ClientCert = filepath.Join(dir, cn+"-client.pem")
				c.Tiers.ClientKey = filepath.Join(dir, cn+"-client.key")
			}
		})
	}
	lower, intruder, bare := lowerEdge("lower"), lowerEdge("intruder"), lowerEdge("")

	expect(t, get(t, lower.URL()+"/a"), 200, "MISS", "o")
	if n := upperRoleRequests(upper); n != 1 {
		t.Fatalf("the upper tier counted %d lower-tier requests from the lower tier with its certificate, want 1", n)
	}
	for name, e := range map[string]*Edge{"another authority's certificate": intruder, "no certificate": bare} {
		before := o.hits("/" + strings.ReplaceAll(name, " ", "-"))
		expect(t, get(t, e.URL()+"/"+strings.ReplaceAll(name, " ", "-")), 200, "MISS", "o")
		if n := upperRoleRequests(upper); n != 1 {
			t.Fatalf("a lower tier with %s and the right token was honoured as a tier (%d upper-role requests)", name, n)
		}
		if o.hits("/"+strings.ReplaceAll(name, " ", "-")) != before+1 || o.last().Header.Get(TierHeader) != "" {
			t.Fatalf("with %s: the origin saw %d requests, marker %q", name, o.hits("/"+strings.ReplaceAll(name, " ", "-")), o.last().Header.Get(TierHeader))
		}
	}
	// The token over the plain listener: a miss (net/http), then a hit (the fast path).
	for range 2 {
		get(t, upper.URL()+"/plain", TierHeader, testTierToken)
	}
	if n := upperRoleRequests(upper); n != 1 {
		t.Fatalf("the token over the plain listener was honoured: %d upper-role requests", n)
	}
	// A browser with no certificate is served over TLS as before.
	pool := x509.NewCertPool()
	pool.AddCert(srvParsed)
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get(upperURL + "/a")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("a TLS client without a certificate: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestTierMutualTLSConfigErrors: half a client pair, client_ca_file without a TLS listener or a
// token, and the fields below the top level are refused, naming the fix.
func TestTierMutualTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca, _ := testutil.WriteClientCert(t, dir, "lower")
	cp, kp, _ := testutil.WriteCert(t, dir, "127.0.0.1")
	for _, c := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Tiers.ClientCert = ca }, "client_key go together"},
		{func(c *Config) { c.Tiers.ClientCAFile = ca }, "configure the tls: listener"},
		{func(c *Config) {
			c.Tiers.ClientCAFile, c.Tiers.Token = ca, ""
			c.TLS = &TLSConfig{Listen: "127.0.0.1:0"}
			c.TLS.Certificates = append(c.TLS.Certificates, tlsCert(cp, kp))
		}, "set tiers.token"},
		{func(c *Config) {
			c.Origins = []OriginConfig{{Hosts: []string{"a.test"}, URL: "http://127.0.0.1:1", Tiers: TierConfig{ClientCAFile: ca}}}
		}, "edge-wide"},
		{func(c *Config) { c.Tiers.ClientCert, c.Tiers.ClientKey = ca, cp }, "tiers.client_cert"}, // a key of another pair
	} {
		cfg := Config{Listen: "127.0.0.1:0", Origin: "http://127.0.0.1:1", Tiers: TierConfig{Token: testTierToken}}
		c.mutate(&cfg)
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error naming %q, got %v", c.want, err)
		}
	}
}
