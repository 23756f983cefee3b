package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// DNSSEC defaults: signatures valid for a week, re-signed daily, DNSKEY TTL of an hour.
const (
	DefaultSigValidity = 7 * 24 * time.Hour
	DefaultSigRefresh  = 24 * time.Hour
	DefaultDNSKEYTTL   = 3600
)

// DNSSEC turns on online signing of one zone (algorithm 13, 15 or 8: the keys'). Give
// either one combined signing key (key_file, a CSK) or a KSK and a ZSK; key files come from
// `switchyard dns keygen` (or BIND's dnssec-keygen .private files with the .key beside them).
type DNSSEC struct {
	// KeyFile is a combined signing key (flags 257) that signs every RRset.
	KeyFile string `yaml:"key_file"`
	// KSKFile is the key-signing key (flags 257): it signs the DNSKEY RRset; its DS goes to the parent.
	KSKFile string `yaml:"ksk_file"`
	// ZSKFile is the zone-signing key (flags 256): it signs every other RRset.
	ZSKFile string `yaml:"zsk_file"`
	// Publish are extra keys put in the DNSKEY RRset without signing the zone (a rollover's
	// incoming or outgoing key); those with flags 257 also sign the DNSKEY RRset.
	Publish []string `yaml:"publish"`
	// Validity is how long a signature is valid from its window's start (default 168h).
	Validity Duration `yaml:"validity"`
	// Refresh is the signing window: a signature is reused within it and replaced after it
	// (default 24h); it must be well below validity so cached answers never outlive a signature.
	Refresh Duration `yaml:"refresh"`
	// DNSKEYTTL is the TTL of the DNSKEY RRset (default 3600).
	DNSKEYTTL uint32 `yaml:"dnskey_ttl"`
	// Policy generates and rolls the zone's keys itself (package keyroll) instead of key files
	// named by hand; the keys and their state live in KeyDir.
	Policy *KeyPolicy `yaml:"policy"`
	// KeyDir is where a policy keeps the zone's key files and its state file (relative paths
	// resolve from the configuration's directory).
	KeyDir string `yaml:"key_dir"`
	// DSCheck is how a policy learns that the parent serves the DS of a new KSK or CSK.
	DSCheck *DSCheck `yaml:"ds_check"`
	// Denial is how names and types that do not exist are proven so: compact (RFC 9824's
	// compact denial, the default) or nsec3 (NSEC3 records made per answer, RFC 5155 with RFC
	// 9276's parameters: for validators and tools that do not know compact denial).
	Denial string `yaml:"denial"`

	// Line is the line of the block in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// UnmarshalYAML decodes a dnssec block strictly and records its line.
func (d *DNSSEC) UnmarshalYAML(n *yaml.Node) error {
	type plain DNSSEC
	if err := strict(n, (*plain)(d)); err != nil {
		return err
	}
	d.Line = n.Line
	return nil
}

func (c *Config) validateDNSSEC(z *Zone) error {
	d := z.DNSSEC
	if d == nil {
		return nil
	}
	where := fmt.Sprintf("line %d: zone %s: field dnssec", d.Line, z.Origin)
	if err := validatePolicy(z, where, c.Store != ""); err != nil {
		return err
	}
	switch {
	case d.Policy != nil:
	case d.KeyFile != "" && (d.KSKFile != "" || d.ZSKFile != ""):
		return errors.New(where + ": key_file (a CSK) and ksk_file/zsk_file exclude each other; keep one scheme")
	case d.KeyFile == "" && d.KSKFile == "" && d.ZSKFile == "":
		return errors.New(where + ".key_file: missing; create a key with `switchyard dns keygen --zone " + z.Origin + "` and name its file")
	case d.KeyFile == "" && (d.KSKFile == "" || d.ZSKFile == ""):
		return errors.New(where + ": ksk_file and zsk_file go together; set both, or one key_file (a CSK)")
	}
	if d.Validity == 0 {
		d.Validity = Duration(DefaultSigValidity)
	}
	if d.Refresh == 0 {
		d.Refresh = Duration(min(DefaultSigRefresh, time.Duration(d.Validity)/4))
	}
	if d.Refresh < Duration(time.Minute) || d.Validity < 2*d.Refresh {
		return fmt.Errorf("%s: refresh %s and validity %s: want refresh >= 1m and validity >= 2 x refresh (e.g. 24h and 168h)",
			where, d.Refresh.D(), d.Validity.D())
	}
	if d.DNSKEYTTL == 0 {
		d.DNSKEYTTL = DefaultDNSKEYTTL
	}
	if p := d.Policy; p != nil && p.ZoneMaxTTL != 0 && d.DNSKEYTTL > p.ZoneMaxTTL {
		return fmt.Errorf("%s: dnskey_ttl %d is above policy.zone_max_ttl %d; lower dnskey_ttl or raise zone_max_ttl",
			where, d.DNSKEYTTL, p.ZoneMaxTTL)
	}
	switch d.Denial {
	case "":
		d.Denial = DenialCompact
	case DenialCompact, DenialNSEC3:
	default:
		return fmt.Errorf("%s.denial: unknown %q; use compact (the default) or nsec3", where, d.Denial)
	}
	return nil
}

// The denial schemes of DNSSEC.Denial.
const (
	DenialCompact = "compact"
	DenialNSEC3   = "nsec3"
)

// KeyPolicy is how a zone's keys are made and rolled (RFC 7583 timings; docs/dns.md "Key policy").
type KeyPolicy struct {
	// Algorithm is 13 (ECDSA P-256 / SHA-256, the default), 15 (Ed25519) or 8 (RSA/SHA-256,
	// for resolvers and registries that know no other).
	Algorithm uint8 `yaml:"algorithm"`
	// KeySize is the size of algorithm 8's keys in bits: 2048 (the default) to 4096.
	KeySize int `yaml:"key_size"`
	// Scheme is csk (one combined key, the default) or ksk_zsk.
	Scheme string `yaml:"scheme"`
	// ZSKLifetime is how long a ZSK signs before its successor takes over (default 30 days).
	ZSKLifetime Duration `yaml:"zsk_lifetime"`
	// KSKLifetime is how long a KSK or CSK is active before a rollover starts (default 365 days).
	KSKLifetime Duration `yaml:"ksk_lifetime"`
	// PropagationDelay is how long a change takes to reach every secondary and the parent's
	// servers (Dprp and DprpP of RFC 7583; default 1h).
	PropagationDelay Duration `yaml:"propagation_delay"`
	// ZoneMaxTTL is the largest TTL the zone's RRsets may have (TTLsig of RFC 7583): a zone
	// with a larger one is refused at load. Without it the zone's own largest TTL is used.
	ZoneMaxTTL uint32 `yaml:"zone_max_ttl"`
	// ParentDSTTL is the TTL of the DS at the parent (TTLds; default 86400), used until a
	// ds_check has seen the real one.
	ParentDSTTL uint32 `yaml:"parent_ds_ttl"`
}

// DSCheck queries the parent's servers for the zone's DS until the new KSK's DS is seen there.
type DSCheck struct {
	// Parents are the parent zone's authoritative servers, host:port.
	Parents []string `yaml:"parents"`
	// Interval is how often they are asked while a DS is awaited (default 1h).
	Interval Duration `yaml:"interval"`
}

// The key schemes of KeyPolicy.Scheme.
const (
	SchemeCSK    = "csk"
	SchemeKSKZSK = "ksk_zsk"
)

// StoreKeyPath is StoreKeyFile, a relative path resolved from the configuration's directory.
func (c *Config) StoreKeyPath() string {
	if c.StoreKeyFile == "" || filepath.IsAbs(c.StoreKeyFile) || c.Dir == "" {
		return c.StoreKeyFile
	}
	return filepath.Join(c.Dir, c.StoreKeyFile)
}

// KeyCacheDir is where a node keeps sealed copies of the keys and states it read from the
// store (state_dir/dnssec-store), so a restart while etcd is down signs with them.
func (c *Config) KeyCacheDir() string { return c.statePath("dnssec-store") }

// validateStore checks the store of the policies' keys: an etcd URL with its key file.
func (c *Config) validateStore() error {
	switch {
	case c.Store == "" && c.StoreKeyFile != "":
		return errors.New("field store_key_file: set without store; leave it out, or set store to the fleet's etcd:// URL")
	case c.Store == "":
		return nil
	case !strings.HasPrefix(c.Store, "etcd://") && !strings.HasPrefix(c.Store, "etcds://"):
		return fmt.Errorf("field store: %q is not an etcd store; use etcd://HOST:PORT[,HOST:PORT...]/PREFIX (or etcds://... over TLS)", c.Store)
	case c.StoreKeyFile == "":
		return errors.New("field store_key_file: missing; the store holds private keys, encrypted with the key in this file: make one with `head -c 32 /dev/urandom > /etc/switchyard/dnssec-store.key` and give every node the same copy")
	}
	return nil
}

func validatePolicy(z *Zone, where string, store bool) error {
	d := z.DNSSEC
	if d.Policy == nil {
		if d.KeyDir != "" || d.DSCheck != nil {
			return errors.New(where + ": key_dir and ds_check belong to a key policy; add policy: {} or drop them")
		}
		return nil
	}
	p := d.Policy
	switch {
	case d.KeyFile != "" || d.KSKFile != "" || d.ZSKFile != "" || len(d.Publish) > 0:
		return errors.New(where + ": policy makes its own keys; drop key_file, ksk_file, zsk_file and publish, or drop policy")
	case d.KeyDir == "" && !store:
		return errors.New(where + ".key_dir: missing; a policy keeps its keys and state there (e.g. /var/lib/switchyard/keys), or in the fleet's store:")
	case d.KeyDir != "" && store:
		return errors.New(where + ".key_dir: set, but the configuration's store: keeps the policies' keys; drop key_dir (or store)")
	}
	switch p.Algorithm {
	case 0:
		p.Algorithm = 13
	case 13, 15, 8:
	default:
		return fmt.Errorf("%s.policy.algorithm: %d is unknown; use 13 (ECDSA P-256), 15 (Ed25519) or 8 (RSA/SHA-256)", where, p.Algorithm)
	}
	switch {
	case p.Algorithm != 8 && p.KeySize != 0:
		return fmt.Errorf("%s.policy.key_size: algorithm %d has one key size; drop key_size (it is for algorithm 8)", where, p.Algorithm)
	case p.Algorithm == 8 && p.KeySize == 0:
		p.KeySize = 2048
	case p.Algorithm == 8 && (p.KeySize < 2048 || p.KeySize > 4096):
		return fmt.Errorf("%s.policy.key_size: %d bits; use 2048 (the default) to 4096", where, p.KeySize)
	}
	switch p.Scheme {
	case "":
		p.Scheme = SchemeCSK
	case SchemeCSK, SchemeKSKZSK:
	default:
		return fmt.Errorf("%s.policy.scheme: unknown %q; use csk or ksk_zsk", where, p.Scheme)
	}
	def := func(v *Duration, d time.Duration) {
		if *v == 0 {
			*v = Duration(d)
		}
	}
	def(&p.ZSKLifetime, 30*24*time.Hour)
	def(&p.KSKLifetime, 365*24*time.Hour)
	def(&p.PropagationDelay, time.Hour)
	if p.ParentDSTTL == 0 {
		p.ParentDSTTL = 86400
	}
	if d.DSCheck != nil {
		if len(d.DSCheck.Parents) == 0 {
			return errors.New(where + ".ds_check.parents: empty; name the parent zone's servers (host:port)")
		}
		def(&d.DSCheck.Interval, time.Hour)
	}
	return nil
}
