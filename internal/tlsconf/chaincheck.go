package tlsconf

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"
)

// checkedIssuer is the ACME issuer with the issued chain checked before certmagic stores it:
// certmagic saves whatever the CA returns, and a chain that does not verify, or whose leaf is not
// for the key that signed the request, would then replace the certificate in use, in storage too,
// and fail every handshake until the next renewal (or load at no start at all). Refused, the
// order fails like any other: counted, logged with its retry, the old certificate kept.
//
// Embedding keeps every other method of the issuer (revocation, ARI, challenge answers). One
// thing is lost: certmagic asks `issuer.(*ACMEIssuer)` before naming the certificate a renewal
// replaces (ARI's optional `replaces`, RFC 9773 section 5), so renewal orders do not name it.
type checkedIssuer struct {
	*certmagic.ACMEIssuer
}

// Issue orders the certificate and checks the chain the CA returned (checkChain).
func (c checkedIssuer) Issue(ctx context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	ic, err := c.ACMEIssuer.Issue(ctx, csr)
	if err != nil {
		return nil, err
	}
	if err := checkChain(ic.Certificate, csr, time.Now()); err != nil {
		return nil, fmt.Errorf("acme certificate refused: %w (the CA at %s returned a bad chain; the certificate in use is kept)", err, c.CA)
	}
	return ic, nil
}

// checkChain checks a PEM chain issued for csr: every block a certificate, the leaf for the
// request's public key and every one of its names, valid at now for server authentication, and
// each certificate signed by the next (verified up to the last one given: the CA's root is
// usually left out, and the client's trust is not the issuer's to know).
func checkChain(chainPEM []byte, csr *x509.CertificateRequest, now time.Time) error {
	var chain []*x509.Certificate
	for rest := chainPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("the chain holds a %q block", b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("parse certificate %d of the chain: %w", len(chain)+1, err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return errors.New("no certificate in the chain")
	}
	leaf := chain[0]
	if pub, ok := leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(csr.PublicKey) {
		return errors.New("the certificate is not for the key of the request")
	}
	names := make([]string, len(leaf.DNSNames))
	for i, n := range leaf.DNSNames {
		names[i] = strings.ToLower(n)
	}
	for _, n := range csr.DNSNames {
		if !slices.Contains(names, strings.ToLower(n)) {
			return fmt.Errorf("the certificate does not name %s (it names %v)", n, leaf.DNSNames)
		}
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(chain[len(chain)-1])
	for _, c := range chain[1:max(1, len(chain)-1)] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("the chain does not verify: %w", err)
	}
	return nil
}
