package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/dns/policy"
)

// GeoDB names the MaxMind databases (GeoIP2 / GeoLite2) the client groups' selectors read:
// country:, continent: and the sites' coordinates from Database (City or Country), asn: from
// ASNDatabase. Both are checked for changes every CheckInterval and reloaded.
type GeoDB struct {
	// Database is a City or Country .mmdb file (relative to the configuration file).
	Database string `yaml:"database"`
	// ASNDatabase is an ASN .mmdb file (GeoLite2-ASN).
	ASNDatabase string `yaml:"asn_database"`
	// CheckInterval is how often the files' modification times are compared (default 5s).
	CheckInterval Duration `yaml:"check_interval"`

	// Line is the line of the block in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// UnmarshalYAML decodes a geo block strictly and records its line.
func (g *GeoDB) UnmarshalYAML(n *yaml.Node) error {
	type plain GeoDB
	if err := strict(n, (*plain)(g)); err != nil {
		return err
	}
	g.Line = n.Line
	return nil
}

// Path resolves a database path from the configuration file's directory.
func (c *Config) Path(p string) string {
	if p == "" || filepath.IsAbs(p) || c.Dir == "" {
		return p
	}
	return filepath.Join(c.Dir, p)
}

// Interval is the check interval with its default.
func (g *GeoDB) Interval() time.Duration {
	if g == nil || g.CheckInterval <= 0 {
		return 5 * time.Second
	}
	return time.Duration(g.CheckInterval)
}

// validateGroups checks the group entries (subnets or database selectors) and that each
// selector has its database.
func (c *Config) validateGroups() error {
	g := c.GeoDB
	if g != nil {
		if g.Database == "" && g.ASNDatabase == "" {
			return fmt.Errorf("line %d: field geo: no database; set database: GeoLite2-City.mmdb and/or asn_database: GeoLite2-ASN.mmdb", g.Line)
		}
		if g.CheckInterval < 0 {
			return fmt.Errorf("line %d: field geo.check_interval: must be positive (default 5s)", g.Line)
		}
	}
	names := make([]string, 0, len(c.Groups))
	for name := range c.Groups {
		names = append(names, name)
	}
	for _, name := range sorted(names) { // the same first error every time
		entries := c.Groups[name]
		if name == "default" {
			return errors.New("field groups: \"default\" is reserved for clients outside every group; rename the group")
		}
		for _, s := range entries {
			_, kind, _, err := policy.ParseEntry(s)
			if err != nil {
				return fmt.Errorf("field groups.%s: %w", name, err)
			}
			switch {
			case kind == policy.SelectASN && (g == nil || g.ASNDatabase == ""):
				return fmt.Errorf("field groups.%s: %q needs an ASN database; set geo: {asn_database: GeoLite2-ASN.mmdb}", name, s)
			case (kind == policy.SelectCountry || kind == policy.SelectContinent) && (g == nil || g.Database == ""):
				return fmt.Errorf("field groups.%s: %q needs a City or Country database; set geo: {database: GeoLite2-City.mmdb}", name, s)
			}
		}
	}
	return nil
}
