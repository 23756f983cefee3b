package tlsconf

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/switchyard/switchyard/internal/rfc2136"
)

// DNS01 answers dns-01 challenges by publishing the TXT record _acme-challenge.NAME with an
// RFC 2136 update signed with TSIG, sent to the zone's primary: the DNS stop (which takes
// updates, docs/dns.md) or any server that does (BIND, Knot, PowerDNS). It is what wildcard
// names need, and what a name whose stop the CA cannot reach on ports 80 and 443 needs.
type DNS01 struct {
	// Server is the primary's address, host:port.
	Server string `yaml:"server"`
	// TSIG is the key the primary's update allow-list names.
	TSIG TSIGKey `yaml:"tsig"`
	// Resolvers are where the record is looked for before the CA is told to check (the
	// servers the CA will ask, or ones in sync with them); default: Server.
	Resolvers []string `yaml:"resolvers"`
	// PropagationTimeout bounds that wait (default 2m).
	PropagationTimeout time.Duration `yaml:"propagation_timeout"`
}

// TSIGKey is a TSIG key: its name, algorithm (hmac-sha256 or hmac-sha512) and base64 secret
// (or a file holding it).
type TSIGKey struct {
	Name       string `yaml:"name"`
	Algorithm  string `yaml:"algorithm"`
	Secret     string `yaml:"secret"`
	SecretFile string `yaml:"secret_file"`
}

// validate reports the first problem under field, naming the fix, and reads the secret file.
func (d *DNS01) validate(field string) (path, problem string, ok bool) {
	if _, _, err := net.SplitHostPort(d.Server); err != nil {
		return field + ".server", fmt.Sprintf("%q is not host:port; give the address of the primary that takes updates, like 10.0.0.53:53", d.Server), false
	}
	for i, r := range d.Resolvers {
		if _, _, err := net.SplitHostPort(r); err != nil {
			return fmt.Sprintf("%s.resolvers[%d]", field, i), fmt.Sprintf("%q is not host:port", r), false
		}
	}
	k := &d.TSIG
	switch {
	case k.Name == "":
		return field + ".tsig.name", "empty; name the TSIG key the primary's update allow-list names", false
	case k.Algorithm != "" && k.Algorithm != "hmac-sha256" && k.Algorithm != "hmac-sha512":
		return field + ".tsig.algorithm", fmt.Sprintf("unknown %q; use hmac-sha256 or hmac-sha512", k.Algorithm), false
	case k.Secret == "" && k.SecretFile == "":
		return field + ".tsig", "no secret; set secret_file (or secret) to the key's base64 secret", false
	}
	if k.Secret == "" {
		b, err := os.ReadFile(k.SecretFile)
		if err != nil {
			return field + ".tsig.secret_file", fmt.Sprintf("read the secret: %v", err), false
		}
		k.Secret = strings.TrimSpace(string(b))
	}
	if _, err := base64.StdEncoding.DecodeString(k.Secret); err != nil {
		return field + ".tsig.secret", "not base64; give the key's secret as `tsig-keygen` or `switchyard dns keygen` prints it", false
	}
	return "", "", true
}

// solver is certmagic's dns-01 solver over the RFC 2136 provider.
func (d *DNS01) solver() *certmagic.DNS01Solver {
	resolvers := d.Resolvers
	if len(resolvers) == 0 {
		resolvers = []string{d.Server}
	}
	return &certmagic.DNS01Solver{DNSManager: certmagic.DNSManager{
		DNSProvider: &rfc2136.Provider{Server: d.Server, KeyName: d.TSIG.Name,
			KeyAlgorithm: d.TSIG.Algorithm, Secret: d.TSIG.Secret},
		Resolvers:          resolvers,
		PropagationTimeout: d.PropagationTimeout,
	}}
}
