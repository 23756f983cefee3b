// Package pki makes a small certificate authority and the certificates it signs, written as PEM
// files: what the lab (and the tests) give an etcd served over TLS with client certificates,
// where a client's common name is its etcd user. Keys are ECDSA P-256; certificates are valid
// from an hour ago for the lifetime asked. Not for production PKI: no revocation, no rotation.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that can sign.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

// NewCA makes a self-signed CA named cn, valid for life.
func NewCA(cn string, life time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make ca key: %w", err)
	}
	tmpl := template(cn, life)
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make ca %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("make ca %s: %w", cn, err)
	}
	return &CA{Cert: cert, key: key, der: der}, nil
}

func template(cn string, life time.Duration) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(life)}
}

// Pair is a signed certificate and its key, PEM-encoded.
type Pair struct{ CertPEM, KeyPEM []byte }

// Issue signs a certificate for cn, usable as a server for the addresses and names given and
// as a client (etcd checks both usages on a peer's certificate).
func (ca *CA) Issue(cn string, addrs []netip.Addr, names []string, life time.Duration) (Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Pair{}, fmt.Errorf("issue %s: %w", cn, err)
	}
	tmpl := template(cn, life)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	tmpl.DNSNames = names
	for _, a := range addrs {
		tmpl.IPAddresses = append(tmpl.IPAddresses, a.AsSlice())
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Pair{}, fmt.Errorf("issue %s: %w", cn, err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Pair{}, fmt.Errorf("issue %s: %w", cn, err)
	}
	return Pair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})}, nil
}

// CertPEM is the CA's certificate, PEM-encoded (what clients and servers trust).
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.der})
}

// WriteCA writes the CA's certificate as dir/ca.pem and returns its path.
func (ca *CA) WriteCA(dir string) (string, error) {
	p := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(p, ca.CertPEM(), 0o644); err != nil {
		return "", fmt.Errorf("write ca: %w", err)
	}
	return p, nil
}

// Write writes the pair as dir/<name>.pem and dir/<name>-key.pem (readable by the owner only)
// and returns their paths.
func (p Pair) Write(dir, name string) (cert, key string, err error) {
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	if err := os.WriteFile(cert, p.CertPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("write certificate %s: %w", name, err)
	}
	if err := os.WriteFile(key, p.KeyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("write key %s: %w", name, err)
	}
	return cert, key, nil
}
