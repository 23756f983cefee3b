package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/miekg/dns"
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
	// Groups are where the members of a group (the catalog's group property, RFC 9432 4.4.2)
	// come from instead, by group name: a field left out is the catalog's.
	Groups map[string]SecondaryFields `yaml:"groups"`
}

// MemberProperties are a zone's properties in the catalog this server produces (RFC 9432
// 4.4): the zones block's catalog field.
type MemberProperties struct {
	// Group is the member's group property: consumers choose its configuration by it (Knot's
	// catalog-template of that name, or a catalogs entry's groups here).
	Group string `yaml:"group"`
	// COO is the catalog the zone moves to (its coo property, RFC 9432 4.4.1): consumers of
	// this catalog hand the zone over once that catalog lists it too.
	COO string `yaml:"coo"`
}

// UnmarshalYAML decodes a zone's catalog block strictly.
func (m *MemberProperties) UnmarshalYAML(n *yaml.Node) error {
	type plain MemberProperties
	return strict(n, (*plain)(m))
}

// CatalogMember is a zone listed in a catalog with its properties: Groups (sorted) and the
// catalog its coo property names ("" for none).
type CatalogMember struct {
	Zone   string
	Groups []string
	COO    string
}

// Equal reports whether m and o list the same zone with the same properties.
func (m CatalogMember) Equal(o CatalogMember) bool {
	return m.Zone == o.Zone && m.COO == o.COO && slices.Equal(m.Groups, o.Groups)
}

// memberSecondary is where member m of src comes from: the first of its groups that src
// configures, its fields left out taken from src's, or src's own.
func (src *CatalogSource) memberSecondary(m CatalogMember) Secondary {
	sec := Secondary(src.From)
	for _, g := range m.Groups {
		gs, ok := src.Groups[g]
		if !ok {
			continue
		}
		if len(gs.Primaries) > 0 {
			sec.Primaries = gs.Primaries
		}
		if gs.TSIG != "" {
			sec.TSIG = gs.TSIG
		}
		if gs.TLS != nil {
			sec.TLS = gs.TLS
		}
		break
	}
	sec.Primaries = slices.Clone(sec.Primaries)
	return sec
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
		src := &c.Catalogs[i]
		if err := check(src.From.Line, fmt.Sprintf("catalogs[%d]", i), &src.Zone); err != nil {
			return err
		}
		for name, g := range src.Groups {
			// Checked as the secondary block a member of the group gets.
			sec := src.memberSecondary(CatalogMember{Groups: []string{name}})
			z := Zone{Origin: fmt.Sprintf("%s (catalogs[%d].groups.%s)", src.Zone, i, name), Secondary: &sec}
			sec.Line = src.From.Line
			if err := c.validateSecondary(&z); err != nil {
				return err
			}
			if len(g.Primaries) > 0 {
				g.Primaries = sec.Primaries // as validated: with their ports
				src.Groups[name] = g
			}
		}
	}
	for i := range c.Zones {
		if c.expanded {
			break // checked in the configuration it was expanded from, which had the catalog block
		}
		if err := c.validateMemberProperties(&c.Zones[i], fqdn); err != nil {
			return err
		}
	}
	return nil
}

// validateMemberProperties checks a zone's catalog block: a catalog is produced, the group is
// a plain name and coo names another catalog.
func (c *Config) validateMemberProperties(z *Zone, fqdn func(string) string) error {
	p := z.Catalog
	if p == nil {
		return nil
	}
	where := fmt.Sprintf("line %d: zone %s: field catalog", z.Line, z.Origin)
	switch {
	case c.Catalog == nil:
		return errors.New(where + ": no catalog is produced; add a catalog block (catalog: {zone: ...}) or drop the zone's catalog field")
	case p.Group == "" && p.COO == "":
		return errors.New(where + ": empty; set group or coo, or drop it")
	case len(p.Group) > 255 || strings.Trim(p.Group, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "":
		return fmt.Errorf("%s.group: %q: use up to 255 letters, digits, '-', '_' and '.'", where, p.Group)
	}
	if p.COO != "" {
		if _, ok := dns.IsDomainName(p.COO); !ok {
			return fmt.Errorf("%s.coo: %q is not a domain name; name the catalog the zone moves to", where, p.COO)
		}
		p.COO = fqdn(p.COO)
		if p.COO == c.Catalog.Zone {
			return fmt.Errorf("%s.coo: %s is this server's own catalog; name the catalog the zone moves to", where, p.COO)
		}
	}
	return nil
}

// CatalogRecords are the records of the produced catalog listing members (none without a
// catalog block): version 2 and a PTR per member under a label derived from its name, so a
// member keeps its label across changes of the others (RFC 9432 4.1), and beside it the
// member's properties (4.4): a TXT per group and a PTR naming the catalog of its coo.
func (c *Config) CatalogRecords(members []CatalogMember) []string {
	if c.Catalog == nil {
		return nil
	}
	members = slices.Clone(members)
	slices.SortFunc(members, func(a, b CatalogMember) int { return strings.Compare(a.Zone, b.Zone) })
	recs := []string{"@ 0 NS invalid.", `version 0 TXT "2"`}
	for _, m := range members {
		id := sha256.Sum256([]byte(strings.ToLower(m.Zone)))
		label := hex.EncodeToString(id[:8]) + ".zones"
		recs = append(recs, fmt.Sprintf("%s 0 PTR %s", label, m.Zone))
		for _, g := range m.Groups {
			recs = append(recs, fmt.Sprintf("group.%s 0 TXT %q", label, g))
		}
		if m.COO != "" {
			recs = append(recs, fmt.Sprintf("coo.%s 0 PTR %s", label, m.COO))
		}
	}
	return recs
}

// CatalogMembers are the configured zones as members of the produced catalog, with the
// properties their catalog fields set.
func (c *Config) CatalogMembers() []CatalogMember {
	var out []CatalogMember
	for _, z := range c.Zones {
		m := CatalogMember{Zone: z.Origin}
		if p := z.Catalog; p != nil {
			m.COO = p.COO
			if p.Group != "" {
				m.Groups = []string{p.Group}
			}
		}
		out = append(out, m)
	}
	return out
}

// WithCatalogs returns a copy of c with its catalogs as zones: the produced catalog (records,
// serial serial) and each consumed catalog and its members (by catalog, from the catalogs'
// copies, each member under one catalog) as secondary zones of that catalog's primaries, or of
// its group's. A member configured as a zone of its own keeps that configuration. The copy has
// no catalog blocks left: validate c, not it, for them (its zones keep their catalog fields,
// which it does not check). Its zones begin with c's, unchanged (see SharingZones).
func (c *Config) WithCatalogs(records []string, serial uint32, members map[string][]CatalogMember) *Config {
	if c.Catalog == nil && len(c.Catalogs) == 0 {
		return c
	}
	out := *c
	out.Catalog, out.Catalogs = nil, nil // expanded: the zones below stand for them
	out.expanded = true
	out.Zones = append(make([]Zone, 0, len(c.Zones)+1+len(c.Catalogs)), c.Zones...)
	have := map[string]bool{}
	for _, z := range c.Zones {
		have[z.Origin] = true
	}
	if cat := c.Catalog; cat != nil {
		out.Zones = append(out.Zones, Zone{Origin: cat.Zone, Records: records, Transfer: cat.Transfer, Line: cat.Line,
			SOA: &SOA{NS: "invalid.", Mbox: "invalid.", Serial: serial, Refresh: 3600, Retry: 600, Expire: 2147483646, Minimum: 0}})
	}
	for i := range c.Catalogs {
		src := &c.Catalogs[i]
		sec := Secondary(src.From)
		out.Zones = append(out.Zones, Zone{Origin: src.Zone, Secondary: &sec, Line: src.From.Line})
		have[src.Zone] = true
		for _, m := range members[src.Zone] {
			if !have[m.Zone] {
				msec := src.memberSecondary(m)
				out.Zones = append(out.Zones, Zone{Origin: m.Zone, Secondary: &msec, Line: src.From.Line, FromCatalog: src.Zone})
				have[m.Zone] = true
			}
		}
	}
	return &out
}

// SharingZones returns a copy of c whose zones are the first len(c.Zones) of expanded's (c's
// WithCatalogs, which copies them unchanged), so a server keeping both configurations keeps one
// copy of each zone's: with 100,000 zones the second was 15 MB.
func (c *Config) SharingZones(expanded *Config) *Config {
	n := len(c.Zones)
	if expanded == c || len(expanded.Zones) < n {
		return c
	}
	out := *c
	out.Zones = expanded.Zones[:n:n] // clipped: an append to it copies, never writes into expanded's
	return &out
}
