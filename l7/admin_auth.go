package l7

import (
	"net/http"
	"os"
	"strings"

	"github.com/switchyard/switchyard/internal/adminauth"
)

// validateAdmin applies the admin listener's rules (internal/adminauth): an address without a
// host binds to loopback, the token may come from a file, and an address reachable from other
// hosts without a token is refused, so that nobody else can drain backends or reload.
func (c *Config) validateAdmin() error {
	a := &c.Admin
	if a.Address == "" {
		return nil
	}
	if !strings.Contains(a.Address, ":") {
		return c.fieldError("admin.address", "%q is not host:port; write e.g. 127.0.0.1:9901", a.Address)
	}
	a.Address = adminauth.Loopback(a.Address)
	if a.Token == "" && a.TokenFile != "" {
		b, err := os.ReadFile(a.TokenFile)
		if err != nil {
			return c.fieldError("admin.token_file", "read token: %v", err)
		}
		a.Token = strings.TrimSpace(string(b))
	}
	if err := adminauth.Check(a.Address, a.Token); err != nil {
		return c.fieldError("admin.address", "%v", err)
	}
	return nil
}

// adminAuth guards a mutating admin endpoint with the current configuration's token.
func (s *Server) adminAuth(h http.HandlerFunc) http.HandlerFunc {
	return adminauth.Require(func() string { return s.Config().Admin.Token }, "switchyard-l7", h)
}
