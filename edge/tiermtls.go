package edge

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
)

// Mutual TLS between tiers. A lower tier presents tiers.client_cert to its https:// upper tiers;
// an upper tier with tiers.client_ca_file asks its TLS clients for a certificate (verified when
// given, so browsers are served as before) and honours a tier marker only on a connection whose
// certificate chains to those authorities, besides carrying tiers.token. The token alone is a
// shared secret anyone who once read it can replay; the certificate's key never leaves the
// lower tier. Markers on the plain listener (the fast path, h2c) are never honoured then.

// checkTierMTLS checks the mutual TLS fields of the top-level tiers, naming the fix.
func (c *Config) checkTierMTLS() error {
	t := c.Tiers
	switch {
	case (t.ClientCert == "") != (t.ClientKey == ""):
		return &fieldError{"tiers.client_cert", "client_cert and client_key go together: give both PEM files, or neither"}
	case t.ClientCAFile != "" && c.TLS == nil:
		return &fieldError{"tiers.client_ca_file", "lower tiers' certificates come over TLS: configure the tls: listener (and point the lower tiers at its https:// URL), or leave client_ca_file out"}
	case t.ClientCAFile != "" && t.Token == "":
		return &fieldError{"tiers.client_ca_file", "it checks lower tiers' markers, which carry tiers.token: set tiers.token on every tier"}
	}
	return nil
}

// loadTierMTLS reads the tier client certificate (nil without one) and the authorities lower
// tiers' certificates must chain to (nil without client_ca_file).
func loadTierMTLS(cfg Config) (cert *tls.Certificate, cas *x509.CertPool, err error) {
	t := cfg.Tiers
	if t.ClientCert != "" {
		pair, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
		if err != nil {
			return nil, nil, &fieldError{"tiers.client_cert", fmt.Sprintf("load the certificate and key: %v (give PEM files of one pair)", err)}
		}
		cert = &pair
	}
	if t.ClientCAFile != "" {
		pem, err := os.ReadFile(t.ClientCAFile)
		if err != nil {
			return nil, nil, &fieldError{"tiers.client_ca_file", fmt.Sprintf("read CA bundle: %v", err)}
		}
		cas = x509.NewCertPool()
		if !cas.AppendCertsFromPEM(pem) {
			return nil, nil, &fieldError{"tiers.client_ca_file", fmt.Sprintf("%s holds no PEM certificate; give the authority that issues the lower tiers' client certificates", t.ClientCAFile)}
		}
	}
	return cert, cas, nil
}

// askTierCerts makes the TLS listener ask for client certificates signed by the tier
// authorities, verified when given; with tls.client_auth too, either authority's are taken.
func (e *Edge) askTierCerts(tc *tls.Config) error {
	if e.tierCAs == nil {
		return nil
	}
	if tc.ClientAuth == tls.NoClientCert {
		tc.ClientAuth, tc.ClientCAs = tls.VerifyClientCertIfGiven, e.tierCAs
		return nil
	}
	pem, err := os.ReadFile(e.cfg.Tiers.ClientCAFile)
	if err != nil {
		return fmt.Errorf("read tiers.client_ca_file: %w", err)
	}
	tc.ClientCAs = tc.ClientCAs.Clone()
	tc.ClientCAs.AppendCertsFromPEM(pem)
	return nil
}

// tierPeerVerified reports whether r came over TLS with a client certificate that chains to
// the tier authorities (always true without client_ca_file).
func (e *Edge) tierPeerVerified(r *http.Request) bool {
	if e.tierCAs == nil {
		return true
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return false
	}
	inter := x509.NewCertPool()
	for _, c := range r.TLS.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	_, err := r.TLS.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: e.tierCAs, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err == nil
}
