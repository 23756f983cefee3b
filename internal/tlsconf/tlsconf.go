// Package tlsconf is the TLS configuration of the HTTP stops' listeners, the one both L7 and
// the edge use: certificate chains from PEM files, the one whose names match the client's SNI
// chosen per handshake, TLS 1.2 at least, and the ALPN protocols the listener offers; and
// certificates obtained and renewed by ACME (acme.go, on caddyserver/certmagic), beside the files
// or instead of them.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
)

// Config is a listener's `tls:` block.
type Config struct {
	Certificates []Certificate `yaml:"certificates"`
	// ACME obtains and renews certificates for its domains (acme.go); the files serve the
	// other names.
	ACME *ACME `yaml:"acme"`
	// ClientAuth asks clients for certificates (mutual TLS).
	ClientAuth *ClientAuth `yaml:"client_auth"`
}

// ClientAuth is a listener's mutual TLS: which client certificates it takes and how a stop
// tells the backend whose they are.
type ClientAuth struct {
	// Mode is require (the default: no verified certificate, no connection) or request (a
	// certificate is verified when the client gives one).
	Mode string `yaml:"mode"`
	// CAFile holds the PEM roots client certificates must chain to.
	CAFile string `yaml:"ca_file"`
	// Header is the request field the verified subject goes upstream in (default
	// X-Client-Cert-Subject); a client's own copies of it are removed, so it cannot be spoofed.
	Header string `yaml:"header"`
}

// SubjectHeader is the field the verified client subject goes upstream in ("" without
// client_auth).
func (c *Config) SubjectHeader() string {
	switch {
	case c == nil || c.ClientAuth == nil:
		return ""
	case c.ClientAuth.Header != "":
		return c.ClientAuth.Header
	}
	return "X-Client-Cert-Subject"
}

// ClientSubject is the subject of the verified client certificate of a connection, "" when
// the client gave none (or it was not verified).
func ClientSubject(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return cs.VerifiedChains[0][0].Subject.String()
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
	if ca := c.ClientAuth; ca != nil {
		switch {
		case ca.Mode != "" && ca.Mode != "require" && ca.Mode != "request":
			return field + ".client_auth.mode", fmt.Sprintf("%q; use require (no certificate, no connection) or request", ca.Mode), false
		case ca.CAFile == "":
			return field + ".client_auth.ca_file", "empty; give the PEM file of the roots client certificates must chain to", false
		case ca.Header != "" && strings.ContainsAny(ca.Header, " :\r\n\t"):
			return field + ".client_auth.header", fmt.Sprintf("%q is not a header field name", ca.Header), false
		}
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
	if ca := c.ClientAuth; ca != nil {
		pem, err := os.ReadFile(ca.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read client_auth ca_file: %w (give the PEM roots client certificates chain to)", err)
		}
		tc.ClientCAs = x509.NewCertPool()
		if !tc.ClientCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read client_auth ca_file %s: no PEM certificate in it", ca.CAFile)
		}
		tc.ClientAuth = tls.RequireAndVerifyClientCert
		if ca.Mode == "request" {
			tc.ClientAuth = tls.VerifyClientCertIfGiven
		}
	}
	return tc, nil
}
