package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Secondary takes a zone from primaries by zone transfer instead of a zone file: AXFR first,
// then IXFR at each SOA refresh or NOTIFY from a primary. The last copy is kept in the state
// directory (Config.StateDir), so a restart serves it at once and asks for the changes since.
type Secondary struct {
	// Primaries are the servers (address:port; :53 when the port is left out) the zone is
	// transferred from, tried in order; a NOTIFY is taken from their addresses only.
	Primaries []string `yaml:"primaries"`
	// TSIG names a tsig_keys entry the SOA queries and transfers are signed with and a NOTIFY
	// must be signed with; empty sends them unsigned.
	TSIG string `yaml:"tsig"`
	// TLS asks the primaries over TLS (XoT, RFC 9103: the SOA queries and the transfers; port
	// 853 when left out), verifying their certificates; nil asks in the clear.
	TLS *SecondaryTLS `yaml:"tls"`

	// Line is the line of the secondary block in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// SecondaryTLS is how a secondary zone verifies its primaries over TLS.
type SecondaryTLS struct {
	// CAFile holds the PEM roots the primaries' certificates must chain to (a self-signed
	// certificate may be its own root); empty: the system's roots.
	CAFile string `yaml:"ca_file"`
	// ServerName is the name the certificates must carry; empty: the primary's address.
	ServerName string `yaml:"server_name"`
}

// UnmarshalYAML decodes a secondary tls block strictly.
func (t *SecondaryTLS) UnmarshalYAML(n *yaml.Node) error {
	type plain SecondaryTLS
	return strict(n, (*plain)(t))
}

// UnmarshalYAML decodes a secondary block strictly and records its line.
func (s *Secondary) UnmarshalYAML(n *yaml.Node) error {
	type plain Secondary
	if err := strict(n, (*plain)(s)); err != nil {
		return err
	}
	s.Line = n.Line
	return nil
}

// validateSecondary checks the zone's secondary block: primaries as address:port (":53"
// added), a known key, and no zone data of its own.
func (c *Config) validateSecondary(z *Zone) error {
	s := z.Secondary
	if s == nil {
		return nil
	}
	where := fmt.Sprintf("line %d: zone %s: field secondary", s.Line, z.Origin)
	switch {
	case z.File != "" || len(z.Records) > 0 || z.SOA != nil:
		return errors.New(where + ": the zone's data comes from its primaries; remove file, records and soa")
	case len(z.Names) > 0:
		return errors.New(where + ": a secondary zone has no dynamic names (the primary decides its records); remove names")
	case z.Update != nil || z.DNSSEC != nil:
		return errors.New(where + ": updates and signing happen on the primary; remove update and dnssec")
	case len(s.Primaries) == 0:
		return errors.New(where + ".primaries: empty; list the primaries' address:port, e.g. 192.0.2.1:53")
	}
	port := "53"
	if s.TLS != nil {
		port = "853"
	}
	for i, p := range s.Primaries {
		if _, err := netip.ParseAddr(p); err == nil {
			p = net.JoinHostPort(p, port)
		}
		ap, err := netip.ParseAddrPort(p)
		if err != nil {
			return fmt.Errorf("%s.primaries: parse %q: write address:port, e.g. 192.0.2.1:53", where, s.Primaries[i])
		}
		s.Primaries[i] = ap.String()
	}
	if s.TSIG != "" && c.Key(s.TSIG) == nil {
		return fmt.Errorf("%s.tsig: %q is not among tsig_keys; add it there or fix the name", where, s.TSIG)
	}
	return nil
}

// PrimaryAddrs returns the primaries' addresses (validated before), for the NOTIFY check.
func (s *Secondary) PrimaryAddrs() []netip.Addr {
	var out []netip.Addr
	for _, p := range s.Primaries {
		if ap, err := netip.ParseAddrPort(p); err == nil {
			out = append(out, ap.Addr().Unmap())
		}
	}
	return out
}

// SecondaryPath returns the file the last transferred copy of the secondary zone z is kept in:
// <state_dir>/<origin>zone (the root zone: root.zone).
func (c *Config) SecondaryPath(z *Zone) string { return c.stateFile(z, "zone") }

// IXFRJournalPath returns the file that keeps the IXFR history of zone z (served to
// secondaries, transfer:) across restarts: <state_dir>/<origin>ixfr (the root zone: root.ixfr).
func (c *Config) IXFRJournalPath(z *Zone) string { return c.stateFile(z, "ixfr") }

// CatalogOwnersPath returns the file that keeps, across restarts, which consumed catalog each
// member zone is served from (RFC 9432 5.4: a zone listed by two catalogs stays with its owner):
// <state_dir>/catalog.owners.
func (c *Config) CatalogOwnersPath() string { return c.statePath("catalog.owners") }

// stateFile names a file of zone z in the state directory: the origin without its final dot
// ("root" for the root zone), then ext.
func (c *Config) stateFile(z *Zone, ext string) string {
	name := strings.TrimSuffix(z.Origin, ".")
	if name == "" {
		name = "root"
	}
	return c.statePath(name + "." + ext)
}

// statePath returns name in the state directory: state_dir, relative to the configuration
// file's directory, or that directory itself when state_dir is unset.
func (c *Config) statePath(name string) string {
	dir := c.StateDir
	if dir == "" || !filepath.IsAbs(dir) && c.Dir != "" {
		dir = filepath.Join(c.Dir, dir)
	}
	return filepath.Join(dir, name)
}
