package l7

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAdminNeedsToken: POST /drain and /reload answer 401 without the right bearer token and
// 403 when no token is configured; GET endpoints stay open on the (loopback) admin listener.
func TestAdminNeedsToken(t *testing.T) {
	base := "listeners: [{address: 127.0.0.1:0}]\nroutes: [{name: all, pool: app}]\npools: [{name: app, backends: [{address: 127.0.0.1:9}]}]\n"
	for _, tc := range []struct {
		admin, auth string
		want        int
	}{
		{"admin: {address: 127.0.0.1:0, token: s3cret}\n", "", http.StatusUnauthorized},
		{"admin: {address: 127.0.0.1:0, token: s3cret}\n", "Bearer wrong", http.StatusUnauthorized},
		{"admin: {address: 127.0.0.1:0, token: s3cret}\n", "s3cret", http.StatusUnauthorized},
		{"admin: {address: 127.0.0.1:0, token: s3cret}\n", "Bearer s3cret", http.StatusOK},
		{"admin: {address: 127.0.0.1:0}\n", "Bearer anything", http.StatusForbidden},
	} {
		t.Run(tc.admin, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(base + tc.admin))
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{"/drain?pool=app&backend=127.0.0.1:9", "/reload"} {
				req := httptest.NewRequest("POST", path, nil)
				if tc.auth != "" {
					req.Header.Set("Authorization", tc.auth)
				}
				rec := httptest.NewRecorder()
				s.AdminHandler().ServeHTTP(rec, req)
				want := tc.want
				if path == "/reload" && want == http.StatusOK {
					want = http.StatusUnprocessableEntity // authorized; no file to reload from
				}
				if rec.Code != want {
					t.Errorf("%s with %q, admin %q: %d %s, want %d", path, tc.auth, tc.admin, rec.Code, rec.Body, want)
				}
			}
			rec := httptest.NewRecorder()
			s.AdminHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/backends", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("GET /backends: %d", rec.Code)
			}
		})
	}
}

// TestAdminAddressRules: an address without a host binds to loopback; one reachable from other
// hosts without a token is refused naming the fix; token_file supplies the token.
func TestAdminAddressRules(t *testing.T) {
	base := "listeners: [{address: 127.0.0.1:0}]\nroutes: [{name: all, pool: app}]\npools: [{name: app, backends: [{address: 127.0.0.1:9}]}]\n"
	cfg, err := ParseConfig([]byte(base + "admin: {address: \":9901\"}\n"))
	if err != nil || cfg.Admin.Address != "127.0.0.1:9901" {
		t.Errorf("\":9901\": %v %q, want 127.0.0.1:9901", err, cfg.Admin.Address)
	}
	for _, a := range []string{"0.0.0.0:9901", "[::]:9901", "198.18.0.1:9901"} {
		_, err := ParseConfig([]byte(base + "admin: {address: \"" + a + "\"}\n"))
		if err == nil || !strings.Contains(err.Error(), "reachable from other hosts and admin.token is not set") {
			t.Errorf("%s without a token: %v, want it refused", a, err)
		}
	}
	tf := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tf, []byte("from-file\n"), 0o600)
	cfg, err = ParseConfig([]byte(base + "admin: {address: \"0.0.0.0:9901\", token_file: " + tf + "}\n"))
	if err != nil || cfg.Admin.Token != "from-file" {
		t.Errorf("token_file: %v %+v", err, cfg.Admin)
	}
}
