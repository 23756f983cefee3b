package edge

import (
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTierTokenOnlyOverTLS: a tier token that would go to an http:// tier is refused with the
// fix, unless tiers.plaintext_token says the network is private; to https:// tiers it is fine.
func TestTierTokenOnlyOverTLS(t *testing.T) {
	for _, c := range []struct {
		tiers TierConfig
		ok    bool
	}{
		{TierConfig{Token: "s", Candidates: []string{"http://10.0.0.2:8080"}}, false},
		{TierConfig{Token: "s", Topology: TopologyCustom, Upper: []string{"http://10.0.0.2:8080"}}, false},
		{TierConfig{Token: "s", Candidates: []string{"http://10.0.0.2:8080"}, PlaintextToken: true}, true},
		{TierConfig{Token: "s", Candidates: []string{"https://10.0.0.2:8443"}}, true},
		{TierConfig{Candidates: []string{"http://10.0.0.2:8080"}}, true},
	} {
		cfg := Config{Listen: "127.0.0.1:0", Origin: "http://127.0.0.1:1", Tiers: c.tiers}
		cfg.ApplyDefaults()
		err := cfg.Validate()
		if c.ok != (err == nil) || (err != nil && !strings.Contains(err.Error(), "plaintext_token")) {
			t.Errorf("%+v: %v, want ok=%v (an error naming plaintext_token)", c.tiers, err, c.ok)
		}
	}
	cfg := Config{Listen: "127.0.0.1:0", Origins: []OriginConfig{{Hosts: []string{"a.test"}, URL: "http://127.0.0.1:1",
		Tiers: TierConfig{Candidates: []string{"http://10.0.0.3:8080"}}}}, Tiers: TierConfig{Token: "s"}}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "origins.1.tiers") {
		t.Errorf("an origin's http:// tier with the token: %v, want an error on origins.1.tiers", err)
	}
}

// TestHTTPSOriginVerified: an https:// origin is verified: with a certificate the system does not
// trust the fetch fails (never served unverified), with origin_ca_file naming its authority it
// is served; a ca_file without a certificate is refused at start.
func TestHTTPSOriginVerified(t *testing.T) {
	o := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "verified")
	}))
	t.Cleanup(o.Close)
	unverified := newEdge(t, o.URL, nil)
	if r := get(t, unverified.URL()+"/x"); r.status == 200 {
		t.Fatalf("an origin with an untrusted certificate was served: %d %q", r.status, r.body)
	}
	ca := filepath.Join(t.TempDir(), "origin-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: o.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	trusted := newEdge(t, o.URL, func(c *Config) { c.OriginCAFile = ca })
	expect(t, get(t, trusted.URL()+"/x"), 200, "MISS", "verified")

	bad := filepath.Join(t.TempDir(), "empty.pem")
	os.WriteFile(bad, []byte("not a certificate\n"), 0o600)
	cfg := Config{Listen: "127.0.0.1:0", Origin: o.URL, OriginCAFile: bad}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "origin_ca_file") {
		t.Fatalf("a CA file without a certificate: %v, want an error naming origin_ca_file", err)
	}
}
