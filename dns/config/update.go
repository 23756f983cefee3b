package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/miekg/dns"
	"gopkg.in/yaml.v3"
)

// Update accepts RFC 2136 dynamic updates of one zone. Every update must be signed with a TSIG
// key of an Allow rule and change only the names and types that rule lists.
type Update struct {
	// Allow are the rules; an update is applied when every record it changes is covered by a
	// rule of the key that signed it.
	Allow []UpdateRule `yaml:"allow"`
	// Journal is the file the applied updates are appended to and replayed from at load,
	// relative to the configuration file (default: the zone file's path + ".updates", or
	// "<origin>updates" beside the configuration for a zone without a file).
	Journal string `yaml:"journal"`

	// Line is the line of the update block in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// UpdateRule lets one key change some names and types of the zone.
type UpdateRule struct {
	// Key names a tsig_keys entry the update must be signed with.
	Key string `yaml:"key"`
	// Names are the owners the key may change, relative to the origin or absolute; "*.sub"
	// covers every name below sub (not sub itself). Empty: every name of the zone.
	Names []string `yaml:"names"`
	// Types are the record types the key may change (TXT, A, ...). Empty: every type.
	Types []string `yaml:"types"`

	// Line is the line of the rule in the YAML file, for error messages.
	Line int `yaml:"-"`
	// types are Types as type codes, filled by validation.
	types []uint16
}

// UnmarshalYAML decodes an update block strictly and records its line.
func (u *Update) UnmarshalYAML(n *yaml.Node) error {
	type plain Update
	if err := strict(n, (*plain)(u)); err != nil {
		return err
	}
	u.Line = n.Line
	return nil
}

// UnmarshalYAML decodes a rule strictly and records its line.
func (r *UpdateRule) UnmarshalYAML(n *yaml.Node) error {
	type plain UpdateRule
	if err := strict(n, (*plain)(r)); err != nil {
		return err
	}
	r.Line = n.Line
	return nil
}

// validateUpdate checks the zone's update block: known keys, names inside the zone, known types
// the server lets an update change; names are made absolute.
func (c *Config) validateUpdate(z *Zone) error {
	u := z.Update
	if u == nil {
		return nil
	}
	if len(u.Allow) == 0 {
		return fmt.Errorf("line %d: zone %s: field update.allow: empty, so no update could ever be applied; add a rule such as {key: acme-key, names: [_acme-challenge], types: [TXT]} or remove update", u.Line, z.Origin)
	}
	for i := range u.Allow {
		r := &u.Allow[i]
		where := fmt.Sprintf("line %d: zone %s: field update.allow[%d]", r.Line, z.Origin, i)
		if r.Key == "" {
			return errors.New(where + ".key: missing; updates are only taken signed: name a tsig_keys entry")
		}
		if c.Key(r.Key) == nil {
			return fmt.Errorf("%s.key: %q is not among tsig_keys; add it there or fix the name", where, r.Key)
		}
		for j, n := range r.Names {
			abs := strings.TrimPrefix(Absolute(n, z.Origin), "*.")
			if !dns.IsSubDomain(z.Origin, abs) {
				return fmt.Errorf("%s.names: %q is outside the zone %s; use a name under the origin", where, n, z.Origin)
			}
			r.Names[j] = Absolute(n, z.Origin)
		}
		r.types = r.types[:0]
		for _, t := range r.Types {
			code, ok := dns.StringToType[strings.ToUpper(t)]
			if !ok || code == dns.TypeANY || code == dns.TypeSOA || code == dns.TypeAXFR || code == dns.TypeIXFR {
				return fmt.Errorf("%s.types: %q is not a type an update may change; use record types such as TXT, A, AAAA, CNAME", where, t)
			}
			r.types = append(r.types, code)
		}
	}
	return nil
}

// JournalPath returns the update journal of zone z, relative paths taken from dir (the
// configuration file's directory).
func (u *Update) JournalPath(z *Zone, dir string) string {
	p := u.Journal
	switch {
	case p == "" && z.File != "":
		p = z.File + ".updates"
	case p == "":
		p = z.Origin + "updates"
	}
	if filepath.IsAbs(p) || dir == "" {
		return p
	}
	return filepath.Join(dir, p)
}

// Allows reports whether the rule lets its key change records of type t at the lowercased,
// absolute name.
func (r *UpdateRule) Allows(name string, t uint16) bool {
	if len(r.types) > 0 && !slices.Contains(r.types, t) {
		return false
	}
	if len(r.Names) == 0 {
		return true
	}
	for _, n := range r.Names {
		if below, ok := strings.CutPrefix(n, "*."); ok {
			if name != below && dns.IsSubDomain(below, name) {
				return true
			}
		} else if name == n {
			return true
		}
	}
	return false
}
