package edge

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/switchyard/switchyard/edge/origin"
)

// Fetches over TLS: every https:// origin and upper tier is verified, against the system's
// roots or the authorities of the ca_file configured beside it (origin_ca_file, origins[].ca_file,
// tiers.ca_file), and the edge-wide tier token travels only to https:// tiers unless the
// operator says the network is private (tiers.plaintext_token); https:// tiers get the tier
// client certificate (tiers.client_cert, edge/tiermtls.go).

// trustOf reads the configured CA files into the transport's trust, by each URL's host:port,
// and gives every https:// tier the tier client certificate (nil: none).
func trustOf(cfg Config, tierCert *tls.Certificate) (origin.Trust, error) {
	trust := origin.Trust{}
	add := func(field, caFile string, cert *tls.Certificate, urls ...string) error {
		var pool *x509.CertPool
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				return &fieldError{field, fmt.Sprintf("read CA bundle: %v", err)}
			}
			pool = x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return &fieldError{field, fmt.Sprintf("%s holds no PEM certificate; give the authority's certificate chain", caFile)}
			}
		}
		if pool == nil && cert == nil {
			return nil
		}
		for _, s := range urls {
			if u, err := url.Parse(s); err == nil && u.Scheme == "https" {
				p := trust[hostPort(u)]
				if pool != nil {
					p.Roots = pool
				}
				if cert != nil {
					p.Cert = cert
				}
				trust[hostPort(u)] = p
			}
		}
		return nil
	}
	tiers := func(t TierConfig) []string { return append(append([]string(nil), t.Candidates...), t.Upper...) }
	if err := add("origin_ca_file", cfg.OriginCAFile, nil, cfg.Origin); err != nil {
		return nil, err
	}
	if err := add("tiers.ca_file", cfg.Tiers.CAFile, tierCert, tiers(cfg.Tiers)...); err != nil {
		return nil, err
	}
	for i, oc := range cfg.Origins {
		if err := add(fmt.Sprintf("origins.%d.ca_file", i+1), oc.CAFile, nil, oc.URL); err != nil {
			return nil, err
		}
		if err := add(fmt.Sprintf("origins.%d.tiers.ca_file", i+1), oc.Tiers.CAFile, tierCert, tiers(oc.Tiers)...); err != nil {
			return nil, err
		}
	}
	return trust, nil
}

// hostPort is u's host:port, the port defaulted from the scheme (the dialer's address).
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// checkTierToken refuses a tier token that would travel in clear to an http:// tier.
func (c *Config) checkTierToken() error {
	if c.Tiers.Token == "" || c.Tiers.PlaintextToken {
		return nil
	}
	check := func(at string, t TierConfig) error {
		for _, s := range append(append([]string(nil), t.Candidates...), t.Upper...) {
			if u, err := url.Parse(s); err == nil && u.Scheme == "http" {
				return &fieldError{at, fmt.Sprintf("tiers.token would travel in clear to %s: use https:// tier URLs (tiers.ca_file for a private authority), or set tiers.plaintext_token: true on a network nobody else can read", s)}
			}
		}
		return nil
	}
	if err := check("tiers", c.Tiers); err != nil {
		return err
	}
	for i, oc := range c.Origins {
		if err := check(fmt.Sprintf("origins.%d.tiers", i+1), oc.Tiers); err != nil {
			return err
		}
	}
	return nil
}
