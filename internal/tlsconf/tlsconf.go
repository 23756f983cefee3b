// Package tlsconf is the TLS configuration of the HTTP stops' listeners, the one both L7 and
// the edge use: certificate chains from PEM files, the one whose names match the client's SNI
// chosen per handshake, TLS 1.2 at least, and the ALPN protocols the listener offers; and
// certificates obtained and renewed by ACME (acme.go, on caddyserver/certmagic), beside the files
// or instead of them.
package tlsconf

import (
	"crypto/tls"
	"fmt"
)

// Config is a listener's `tls:` block.
type Config struct {
	Certificates []Certificate `yaml:"certificates"`
	// ACME obtains and renews certificates for its domains (acme.go); the files serve the
	// other names.
	ACME *ACME `yaml:"acme"`
}

// Certificate is one PEM certificate chain and its key.
type Certificate struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// Validate reports what is missing or wrong, as "certificates..." or "acme..." paths under
// field (e.g. "listeners[0].tls"), for the stops' line-and-field errors.
func (c *Config) Validate(field string) (path, problem string, ok bool) {
	if len(c.Certificates) == 0 && c.ACME == nil {
		return field + ".certificates", "empty; list cert and key files, or obtain certificates with acme:", false
	}
	if c.ACME != nil {
		if path, problem, ok := c.ACME.validate(field + ".acme"); !ok {
			return path, problem, false
		}
	}
	for i, cert := range c.Certificates {
		if cert.Cert == "" || cert.Key == "" {
			return fmt.Sprintf("%s.certificates[%d]", field, i), "set both cert and key", false
		}
	}
	return "", "", true
}

// Load reads the certificate files into a server configuration offering alpn (e.g. "h2",
// "http/1.1"; none: no ALPN). It leaves acme: out; Open serves both.
func Load(c *Config, alpn ...string) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: alpn}
	for _, cert := range c.Certificates {
		kp, err := tls.LoadX509KeyPair(cert.Cert, cert.Key)
		if err != nil {
			return nil, fmt.Errorf("load certificate %s: %w (check the cert and key paths and that the key matches)", cert.Cert, err)
		}
		// With several certificates crypto/tls picks the one whose names match the client's SNI.
		tc.Certificates = append(tc.Certificates, kp)
	}
	return tc, nil
}
