package config

import (
	"fmt"
	"net/netip"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/internal/tlsconf"
)

// TLS is the DNS over TLS listener (RFC 7858, TLS 1.3, ALPN "dot"), which also serves zone
// transfers over TLS (XoT, RFC 9103) to the secondaries a zone's transfer block allows.
type TLS struct {
	// Listen is the address:port of the listener (853 is DoT's port).
	Listen string `yaml:"listen"`
	// Certificates are the PEM certificate chains and keys (the one matching the client's SNI
	// is chosen, as on the HTTP stops' listeners: internal/tlsconf).
	Certificates []tlsconf.Certificate `yaml:"certificates"`
	// IdleTimeout closes a connection without a query for this long (default 10s; RFC 7858 3.4
	// asks servers to keep idle connections a while, RFC 7766 6.2.3 tens of seconds at most).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxConnections bounds the concurrent TLS clients (default 512).
	MaxConnections int `yaml:"max_connections"`

	// Line is the line of the block in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// UnmarshalYAML decodes a tls block strictly and records its line.
func (t *TLS) UnmarshalYAML(n *yaml.Node) error {
	type plain TLS
	if err := strict(n, (*plain)(t)); err != nil {
		return err
	}
	t.Line = n.Line
	return nil
}

// Idle is the idle timeout with its default.
func (t *TLS) Idle() time.Duration {
	if t.IdleTimeout <= 0 {
		return 10 * time.Second
	}
	return time.Duration(t.IdleTimeout)
}

// Conns is the connection bound with its default.
func (t *TLS) Conns() int {
	if t.MaxConnections <= 0 {
		return 512
	}
	return t.MaxConnections
}

// TLSConfig is the block as the shared TLS configuration, certificate paths resolved from the
// configuration file's directory.
func (c *Config) TLSConfig() *tlsconf.Config {
	tc := &tlsconf.Config{}
	for _, cert := range c.TLS.Certificates {
		tc.Certificates = append(tc.Certificates, tlsconf.Certificate{Cert: c.Path(cert.Cert), Key: c.Path(cert.Key)})
	}
	return tc
}

func (c *Config) validateTLS() error {
	t := c.TLS
	if t == nil {
		return nil
	}
	where := fmt.Sprintf("line %d: field tls", t.Line)
	if _, err := netip.ParseAddrPort(t.Listen); err != nil {
		return fmt.Errorf("%s.listen: parse %q: write address:port, e.g. 0.0.0.0:853", where, t.Listen)
	}
	if t.IdleTimeout < 0 || t.MaxConnections < 0 {
		return fmt.Errorf("%s: idle_timeout and max_connections must be positive", where)
	}
	tc := tlsconf.Config{Certificates: t.Certificates}
	if path, problem, ok := tc.Validate("tls"); !ok {
		return fmt.Errorf("line %d: field %s: %s", t.Line, path, problem)
	}
	return nil
}
