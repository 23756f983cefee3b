package config

import (
	"errors"
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// DNSSEC defaults: signatures valid for a week, re-signed daily, DNSKEY TTL of an hour.
const (
	DefaultSigValidity = 7 * 24 * time.Hour
	DefaultSigRefresh  = 24 * time.Hour
	DefaultDNSKEYTTL   = 3600
)

// DNSSEC turns on online signing of one zone with ECDSA P-256 / SHA-256 (algorithm 13). Give
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

func validateDNSSEC(z *Zone) error {
	d := z.DNSSEC
	if d == nil {
		return nil
	}
	where := fmt.Sprintf("line %d: zone %s: field dnssec", d.Line, z.Origin)
	switch {
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
