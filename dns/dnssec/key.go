// Package dnssec signs the DNS stop's answers online: ECDSA P-256 / SHA-256 (algorithm 13, RFC
// 6605), Ed25519 (15, RFC 8080) or RSA/SHA-256 (8, RFC 5702) keys loaded from files, RRSIGs made per RRset when a DO=1 query is answered and kept in a
// cache keyed by the RRset's content and the signing window, and the NSEC records of compact
// denial of existence (RFC 9824). The zone data stays unsigned; policy answers, which differ per
// client, are signed the same way as static ones.
package dnssec

import (
	"bufio"
	"bytes"
	"crypto"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"math/big"
	"os"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Key flags: a zone key (256), and a zone key with the secure entry point bit (257), the one a
// DS at the parent points to (a KSK or a CSK).
const (
	FlagsZSK = 256
	FlagsKSK = 257
)

// Key is a DNSKEY with its private half.
type Key struct {
	// DNSKEY is the public record as published at the apex.
	DNSKEY *dns.DNSKEY
	// Tag is the key tag (RFC 4034 appendix B) that RRSIGs and DS records name.
	Tag  uint16
	priv crypto.Signer // *ecdsa.PrivateKey (algorithm 13), ed25519.PrivateKey (15) or *rsa.PrivateKey (8)
}

// SEP reports whether the key has the secure entry point bit (a KSK or CSK).
func (k *Key) SEP() bool { return k.DNSKEY.Flags&1 == 1 }

// Generate makes a new P-256 key for zone (fully qualified) with flags FlagsKSK or FlagsZSK.
func Generate(zone string, flags uint16, ttl uint32) (*Key, error) {
	return GenerateAlgorithm(zone, dns.ECDSAP256SHA256, 0, flags, ttl)
}

// Algorithms are the signing algorithms supported, by number, with their names.
var Algorithms = map[uint8]string{dns.RSASHA256: "RSASHA256", dns.ECDSAP256SHA256: "ECDSAP256SHA256", dns.ED25519: "ED25519"}

// RSA key sizes: 2048 bits unless told (RFC 8624 3.1 and NIST SP 800-57 rate 1024 too weak);
// DNSKEYs over 4096 bits make responses too large to be worth it.
const (
	DefaultRSABits = 2048
	MinRSABits     = 2048
	MaxRSABits     = 4096
)

// GenerateAlgorithm makes a new key of algorithm alg (13: ECDSA P-256, 15: Ed25519, 8:
// RSA/SHA-256 of bits bits, 0 meaning DefaultRSABits; bits is ignored for the others).
func GenerateAlgorithm(zone string, alg uint8, bits int, flags uint16, ttl uint32) (*Key, error) {
	if Algorithms[alg] == "" {
		return nil, fmt.Errorf("generate dnssec key: algorithm %d is not supported; use 13 (ECDSAP256SHA256), 15 (ED25519) or 8 (RSASHA256)", alg)
	}
	switch {
	case alg != dns.RSASHA256:
		bits = 256 // miekg takes 256 bits for both curves
	case bits == 0:
		bits = DefaultRSABits
	case bits < MinRSABits || bits > MaxRSABits:
		return nil, fmt.Errorf("generate dnssec key: RSA key size %d: want %d to %d bits", bits, MinRSABits, MaxRSABits)
	}
	k := &dns.DNSKEY{Hdr: dns.RR_Header{Name: dns.CanonicalName(zone), Rrtype: dns.TypeDNSKEY, Class: dns.ClassINET, Ttl: ttl},
		Flags: flags, Protocol: 3, Algorithm: alg}
	priv, err := k.Generate(bits)
	if err != nil {
		return nil, fmt.Errorf("generate dnssec key: %w", err)
	}
	return &Key{DNSKEY: k, Tag: k.KeyTag(), priv: priv.(crypto.Signer)}, nil
}

// DS returns the delegation signer record (SHA-256 digest, RFC 4509) for the parent zone.
func (k *Key) DS() *dns.DS { return k.DNSKEY.ToDS(dns.SHA256) }

// File returns the key file's text: comments, the DNSKEY record, then the private key in BIND's
// Private-key-format v1.3, so one file holds the whole key and BIND tools can read its tail.
func (k *Key) File(now time.Time) []byte {
	kind := "ZSK"
	if k.SEP() {
		kind = "KSK or CSK"
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "; switchyard DNSSEC key for %s: %s, flags %d, algorithm %d (%s), key tag %d\n",
		k.DNSKEY.Hdr.Name, kind, k.DNSKEY.Flags, k.DNSKEY.Algorithm, Algorithms[k.DNSKEY.Algorithm], k.Tag)
	fmt.Fprintf(&b, "; created %s; keep this file secret (mode 0600)\n", now.UTC().Format(time.RFC3339))
	fmt.Fprintln(&b, k.DNSKEY.String())
	b.WriteString(k.DNSKEY.PrivateKeyString(k.priv))
	return b.Bytes()
}

// LoadKey reads a key file for zone: one written by `switchyard dns keygen` (the DNSKEY line and
// the private key in one file), or a BIND K<zone>+013+<tag>.private whose .key file lies beside
// it. It checks the algorithm, the owner and that the private key matches the public one.
func LoadKey(path, zone string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read dnssec key: %w", err)
	}
	return ParseKey(b, path, zone)
}

// ParseKey reads a key file's text b for zone as LoadKey does; path names it in errors (and, for
// a BIND .private file, says where its .key lies).
func ParseKey(b []byte, path, zone string) (*Key, error) {
	var err error
	var pub *dns.DNSKEY
	var private strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, ";"):
		case strings.Contains(line, "DNSKEY") && !strings.Contains(line, ":"):
			if pub, err = parseDNSKEY(line); err != nil {
				return nil, fmt.Errorf("dnssec key %s: %w", path, err)
			}
		default:
			private.WriteString(line + "\n")
		}
	}
	if pub == nil && strings.HasSuffix(path, ".private") {
		kb, err := os.ReadFile(strings.TrimSuffix(path, ".private") + ".key")
		if err != nil {
			return nil, fmt.Errorf("dnssec key %s: no DNSKEY line and no .key file beside it: %w", path, err)
		}
		for _, line := range strings.Split(string(kb), "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, ";") {
				if pub, err = parseDNSKEY(l); err != nil {
					return nil, fmt.Errorf("dnssec key %s.key: %w", strings.TrimSuffix(path, ".private"), err)
				}
				break
			}
		}
	}
	if pub == nil {
		return nil, fmt.Errorf("dnssec key %s: no DNSKEY record; create the file with `switchyard dns keygen --zone %s`", path, zone)
	}
	if err := checkPublic(pub, zone); err != nil {
		return nil, fmt.Errorf("dnssec key %s: %w", path, err)
	}
	priv, err := pub.ReadPrivateKey(strings.NewReader(private.String()), path)
	if err != nil {
		return nil, fmt.Errorf("dnssec key %s: read the private key: %w", path, err)
	}
	var derived []byte
	switch p := priv.(type) {
	case *ecdsa.PrivateKey:
		if p.Curve == elliptic.P256() && pub.Algorithm == dns.ECDSAP256SHA256 {
			derived = ecPublic(p)
		}
	case ed25519.PrivateKey:
		if pub.Algorithm == dns.ED25519 {
			derived = p.Public().(ed25519.PublicKey)
		}
	case *rsa.PrivateKey:
		// Validate checks that the file's primes make its modulus (miekg's reader takes the
		// modulus from the DNSKEY or the file, depending on its version): a private key that
		// is not the DNSKEY's fails here or in the comparison below.
		if pub.Algorithm == dns.RSASHA256 {
			derived = []byte{}
			if p.Validate() == nil {
				p.Precompute() // else each signature derives the CRT values again
				derived = rsaPublic(p.N, p.E)
			}
		}
	}
	if derived == nil {
		return nil, fmt.Errorf("dnssec key %s: the private key is not of algorithm %d; generate one with `switchyard dns keygen`", path, pub.Algorithm)
	}
	if !bytes.Equal(derived, pubBytes(pub)) {
		return nil, fmt.Errorf("dnssec key %s: the private key does not match the DNSKEY record (tag %d); the file was edited or mixed up", path, pub.KeyTag())
	}
	return &Key{DNSKEY: pub, Tag: pub.KeyTag(), priv: priv.(crypto.Signer)}, nil
}

func parseDNSKEY(line string) (*dns.DNSKEY, error) {
	rr, err := dns.NewRR(line)
	if err != nil {
		return nil, fmt.Errorf("parse DNSKEY record: %w", err)
	}
	k, ok := rr.(*dns.DNSKEY)
	if !ok {
		return nil, fmt.Errorf("parse DNSKEY record: got %s", dns.TypeToString[rr.Header().Rrtype])
	}
	return k, nil
}

func checkPublic(k *dns.DNSKEY, zone string) error {
	if Algorithms[k.Algorithm] == "" {
		return fmt.Errorf("algorithm %d is not supported; only 13 (ECDSAP256SHA256), 15 (ED25519) and 8 (RSASHA256): make a key with `switchyard dns keygen`", k.Algorithm)
	}
	if !strings.EqualFold(dns.Fqdn(k.Hdr.Name), zone) {
		return fmt.Errorf("the key belongs to %s, not to zone %s; use that zone's key", k.Hdr.Name, zone)
	}
	if k.Flags != FlagsKSK && k.Flags != FlagsZSK || k.Protocol != 3 {
		return fmt.Errorf("flags %d protocol %d: want flags 256 (ZSK) or 257 (KSK/CSK), protocol 3", k.Flags, k.Protocol)
	}
	if k.Algorithm == dns.RSASHA256 {
		if bits := rsaBits(pubBytes(k)); bits < MinRSABits || bits > MaxRSABits {
			return fmt.Errorf("the RSA public key has %d bits: want %d to %d (a shorter key is breakable); make a new key", bits, MinRSABits, MaxRSABits)
		}
		return nil
	}
	if want := map[uint8]int{dns.ECDSAP256SHA256: 64, dns.ED25519: 32}[k.Algorithm]; len(pubBytes(k)) != want {
		return fmt.Errorf("the public key is %d bytes, not the %d of algorithm %d", len(pubBytes(k)), want, k.Algorithm)
	}
	return nil
}

// rsaPublic is the DNSKEY public key field of an RSA key (RFC 3110 2: the exponent's length,
// one byte or a zero and two, the exponent, then the modulus).
func rsaPublic(n *big.Int, e int) []byte {
	exp := big.NewInt(int64(e)).Bytes()
	var b []byte
	if len(exp) < 256 {
		b = append(b, byte(len(exp)))
	} else {
		b = append(b, 0, byte(len(exp)>>8), byte(len(exp)))
	}
	return append(append(b, exp...), n.Bytes()...)
}

// rsaBits is the modulus size of an RFC 3110 public key field, 0 when it is malformed.
func rsaBits(b []byte) int {
	if len(b) < 3 {
		return 0
	}
	n, off := int(b[0]), 1
	if n == 0 {
		n, off = int(b[1])<<8|int(b[2]), 3
	}
	if off+n >= len(b) {
		return 0
	}
	return new(big.Int).SetBytes(b[off+n:]).BitLen()
}

// pubBytes is the DNSKEY's public key field decoded (RFC 6605: x || y, 32 bytes each).
func pubBytes(k *dns.DNSKEY) []byte {
	b, _ := base64.StdEncoding.DecodeString(k.PublicKey)
	return b
}

// ecPublic derives the public point from the private scalar (miekg's reader copies the public
// half from the DNSKEY, so comparing that would prove nothing).
func ecPublic(p *ecdsa.PrivateKey) []byte {
	if p.D == nil || p.D.BitLen() > 256 {
		return nil
	}
	sk, err := ecdh.P256().NewPrivateKey(p.D.FillBytes(make([]byte, 32)))
	if err != nil {
		return nil
	}
	return sk.PublicKey().Bytes()[1:] // uncompressed point: 0x04 || x || y
}
