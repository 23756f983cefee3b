package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"gopkg.in/yaml.v3"
)

// TSIGAlgorithm is the default TSIG algorithm (RFC 8945 requires HMAC-SHA256 support);
// TSIGAlgorithmSHA512 is the other one accepted.
const (
	TSIGAlgorithm       = "hmac-sha256"
	TSIGAlgorithmSHA512 = "hmac-sha512"
)

// DefaultJournal is how many serial changes a zone keeps for IXFR by default.
const DefaultJournal = 100

// TSIGKey is a shared secret for transaction signatures.
type TSIGKey struct {
	// Name is the key's name, the same on primary and secondary (e.g. "xfr-key").
	Name string `yaml:"name"`
	// Algorithm is hmac-sha256 (the default) or hmac-sha512.
	Algorithm string `yaml:"algorithm"`
	// Secret is the base64 key, e.g. from `openssl rand -base64 32` or `keymgr -t name`.
	Secret string `yaml:"secret"`

	// Line is the line of the key in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// Transfer configures zone transfers of one zone to its secondaries.
type Transfer struct {
	// Allow are the client prefixes that may transfer the zone ("127.0.0.1/32"); empty allows
	// any address, which then needs Key.
	Allow []string `yaml:"allow"`
	// Key names a tsig_keys entry that transfers must be signed with; NOTIFY is signed with it.
	Key string `yaml:"key"`
	// Notify are the secondaries (address:port) told when the zone's serial changes.
	Notify []string `yaml:"notify"`
	// Journal is how many serial changes are kept for incremental transfers (default 100).
	Journal int `yaml:"journal"`

	// Line is the line of the transfer block in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// UnmarshalYAML decodes a key strictly and records its line.
func (k *TSIGKey) UnmarshalYAML(n *yaml.Node) error {
	type plain TSIGKey
	if err := strict(n, (*plain)(k)); err != nil {
		return err
	}
	k.Line = n.Line
	return nil
}

// UnmarshalYAML decodes a transfer block strictly and records its line.
func (t *Transfer) UnmarshalYAML(n *yaml.Node) error {
	type plain Transfer
	if err := strict(n, (*plain)(t)); err != nil {
		return err
	}
	t.Line = n.Line
	return nil
}

// KeyName returns the key's name as it appears on the wire: fully qualified, lowercased.
func KeyName(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

func (c *Config) validateKeys() error {
	seen := map[string]bool{}
	for i := range c.TSIGKeys {
		k := &c.TSIGKeys[i]
		if k.Name == "" {
			return fmt.Errorf("line %d: field tsig_keys[%d].name: missing; name the key as the secondary does, e.g. xfr-key", k.Line, i)
		}
		if k.Algorithm == "" {
			k.Algorithm = TSIGAlgorithm
		}
		k.Algorithm = strings.ToLower(k.Algorithm)
		if k.Algorithm != TSIGAlgorithm && k.Algorithm != TSIGAlgorithmSHA512 {
			return fmt.Errorf("line %d: key %s: field algorithm: %q is not supported; use hmac-sha256 or hmac-sha512", k.Line, k.Name, k.Algorithm)
		}
		b, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil || len(b) < 16 {
			return fmt.Errorf("line %d: key %s: field secret: want base64 of at least 16 bytes (openssl rand -base64 32)", k.Line, k.Name)
		}
		if seen[KeyName(k.Name)] {
			return fmt.Errorf("line %d: key %s: field name: configured twice", k.Line, k.Name)
		}
		seen[KeyName(k.Name)] = true
	}
	return nil
}

// Key returns the TSIG key called name, or nil.
func (c *Config) Key(name string) *TSIGKey {
	for i := range c.TSIGKeys {
		if KeyName(c.TSIGKeys[i].Name) == KeyName(name) {
			return &c.TSIGKeys[i]
		}
	}
	return nil
}

func (c *Config) validateTransfer(z *Zone) error {
	for i := range z.Names {
		n := &z.Names[i]
		for _, a := range n.TransferFallback {
			if _, err := netip.ParseAddr(a); err != nil {
				return fmt.Errorf("line %d: zone %s name %q: field transfer_fallback: parse %q: not an IP address", n.Line, z.Origin, n.Name, a)
			}
		}
	}
	t := z.Transfer
	if t == nil {
		return nil
	}
	where := fmt.Sprintf("line %d: zone %s: field transfer", t.Line, z.Origin)
	for _, a := range t.Allow {
		if _, err := parsePrefixOrAddr(a); err != nil {
			return fmt.Errorf("%s.allow: parse %q: write a prefix such as 192.0.2.0/24 or an address", where, a)
		}
	}
	if t.Key != "" && c.Key(t.Key) == nil {
		return fmt.Errorf("%s.key: %q is not among tsig_keys; add it there or fix the name", where, t.Key)
	}
	if len(t.Allow) == 0 && t.Key == "" {
		return errors.New(where + ".allow: empty and no key: anyone could copy the zone; list the secondaries' addresses or set key")
	}
	for _, a := range t.Notify {
		if _, err := netip.ParseAddrPort(a); err != nil {
			return fmt.Errorf("%s.notify: parse %q: write address:port, e.g. 192.0.2.2:53", where, a)
		}
	}
	if t.Journal < 0 {
		return fmt.Errorf("%s.journal: %d is negative; use 0 (AXFR only) or more", where, t.Journal)
	}
	if t.Journal == 0 {
		t.Journal = DefaultJournal
	}
	return nil
}

// AllowPrefixes returns the parsed allow list (validated before).
func (t *Transfer) AllowPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, a := range t.Allow {
		if p, err := parsePrefixOrAddr(a); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}

// FallbackAddresses returns what a zone transfer carries for the dynamic name: its
// transfer_fallback when set, otherwise the addresses of the site the policy answers a client
// outside every group with every site up (geolocation: the first site of the default chain;
// failover: the first of the chain; latency: the lowest default figure, else the first site;
// weighted: the heaviest site). Secondaries run no policy, so this answer is static.
func (n *Name) FallbackAddresses() []string {
	if len(n.TransferFallback) > 0 {
		return n.TransferFallback
	}
	site := ""
	switch n.Policy {
	case PolicyGeolocation:
		if chain := n.Geo["default"]; len(chain) > 0 {
			site = chain[0]
		}
	case PolicyFailover:
		if len(n.Chain) > 0 {
			site = n.Chain[0]
		}
	case PolicyLatency:
		best := 0.0
		for _, s := range n.Sites { // in site order, so ties are stable
			if v := n.Latency["default"][s.Name]; v > 0 && (site == "" || v < best) {
				site, best = s.Name, v
			}
		}
	case PolicyWeighted:
		best := -1.0
		for _, s := range n.Sites {
			if s.Weight > best {
				site, best = s.Name, s.Weight
			}
		}
	}
	for _, s := range n.Sites {
		if s.Name == site {
			return s.Addresses
		}
	}
	if len(n.Sites) > 0 {
		return n.Sites[0].Addresses
	}
	return nil
}
