package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Catalog zones (RFC 9432) both ways. Produced: a zone listing this server's zones, which
// secondaries that read catalogs (Knot's catalog-role: interpret, BIND's catalog-zones) take
// by transfer to serve every zone without being told of each. Consumed: a catalog zone taken
// from primaries, each of its members served as a secondary zone of the same primaries, added
// and removed as the catalog changes, without a restart.

// Catalog is the catalog zone this server produces.
type Catalog struct {
	// Zone is the catalog's name, e.g. catalog.invalid. (RFC 9432 suggests under invalid.).
	Zone string `yaml:"zone"`
	// Transfer is who may take the catalog and whom to notify (as a zone's transfer block).
	Transfer *Transfer `yaml:"transfer"`
	// Line is the line of the catalog block in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// CatalogSource is a catalog zone this server consumes: the catalog and every member zone are
// transferred from its primaries (with its key and TLS).
type CatalogSource struct {
	// Zone is the catalog's name on the primaries.
	Zone string `yaml:"zone"`
	// From is where the catalog and its members come from (primaries, tsig, tls), written
	// inline in the entry.
	From SecondaryFields `yaml:",inline"`
}

// SecondaryFields are a Secondary's fields without its decoder, for inlining them (yaml.v3
// would hand the whole entry to an inlined type's own UnmarshalYAML).
type SecondaryFields Secondary

// UnmarshalYAML decodes a catalog block strictly and records its line.
func (c *Catalog) UnmarshalYAML(n *yaml.Node) error {
	type plain Catalog
	if err := strict(n, (*plain)(c)); err != nil {
		return err
	}
	c.Line = n.Line
	return nil
}

// UnmarshalYAML decodes a catalogs entry strictly and records its line.
func (c *CatalogSource) UnmarshalYAML(n *yaml.Node) error {
	type plain CatalogSource
	if err := strict(n, (*plain)(c)); err != nil {
		return err
	}
	c.From.Line = n.Line
	return nil
}

// validateCatalogs checks the catalog blocks before they are expanded into zones: names that
// are absolute and not configured as zones too.
func (c *Config) validateCatalogs() error {
	fqdn := func(n string) string { return strings.TrimSuffix(strings.ToLower(n), ".") + "." }
	names := map[string]bool{}
	for i := range c.Zones {
		names[fqdn(c.Zones[i].Origin)] = true
	}
	check := func(line int, field string, zone *string) error {
		if *zone == "" {
			return fmt.Errorf("line %d: field %s.zone: missing; name the catalog zone, e.g. catalog.invalid.", line, field)
		}
		*zone = fqdn(*zone)
		if names[*zone] {
			return fmt.Errorf("line %d: field %s.zone: %s is also configured as a zone; a catalog is a zone of its own, give it another name", line, field, *zone)
		}
		names[*zone] = true
		return nil
	}
	if cat := c.Catalog; cat != nil {
		if err := check(cat.Line, "catalog", &cat.Zone); err != nil {
			return err
		}
	}
	for i := range c.Catalogs {
		if err := check(c.Catalogs[i].From.Line, fmt.Sprintf("catalogs[%d]", i), &c.Catalogs[i].Zone); err != nil {
			return err
		}
	}
	return nil
}

// CatalogRecords are the records of the produced catalog listing zones (none without a
// catalog block): version 2 and a PTR per member under a label derived from its name, so a
// member keeps its label across changes of the others (RFC 9432 4.1).
func (c *Config) CatalogRecords(zones []string) []string {
	if c.Catalog == nil {
		return nil
	}
	sort.Strings(zones)
	recs := []string{"@ 0 NS invalid.", `version 0 TXT "2"`}
	for _, z := range zones {
		id := sha256.Sum256([]byte(strings.ToLower(z)))
		recs = append(recs, fmt.Sprintf("%s.zones 0 PTR %s", hex.EncodeToString(id[:8]), z))
	}
	return recs
}

// WithCatalogs returns a copy of c with its catalogs as zones: the produced catalog (records,
// serial serial) and each consumed catalog and its members (by catalog, from the catalogs'
// copies) as secondary zones of that catalog's primaries. A member configured as a zone of its
// own keeps that configuration. The copy has no catalog blocks left: validate c, not it, for
// them.
func (c *Config) WithCatalogs(records []string, serial uint32, members map[string][]string) *Config {
	if c.Catalog == nil && len(c.Catalogs) == 0 {
		return c
	}
	out := *c
	out.Catalog, out.Catalogs = nil, nil // expanded: the zones below stand for them
	out.Zones = append([]Zone(nil), c.Zones...)
	have := map[string]bool{}
	for _, z := range c.Zones {
		have[z.Origin] = true
	}
	if cat := c.Catalog; cat != nil {
		out.Zones = append(out.Zones, Zone{Origin: cat.Zone, Records: records, Transfer: cat.Transfer, Line: cat.Line,
			SOA: &SOA{NS: "invalid.", Mbox: "invalid.", Serial: serial, Refresh: 3600, Retry: 600, Expire: 2147483646, Minimum: 0}})
	}
	for _, src := range c.Catalogs {
		sec := Secondary(src.From)
		out.Zones = append(out.Zones, Zone{Origin: src.Zone, Secondary: &sec, Line: src.From.Line})
		have[src.Zone] = true
		for _, m := range members[src.Zone] {
			if !have[m] {
				msec := Secondary(src.From)
				out.Zones = append(out.Zones, Zone{Origin: m, Secondary: &msec, Line: src.From.Line, FromCatalog: src.Zone})
				have[m] = true
			}
		}
	}
	return &out
}
