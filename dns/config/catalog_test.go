package config

import (
	"strings"
	"testing"
)

// Catalog blocks are checked before they become zones: a name, not one of the zones.
func TestCatalogValidation(t *testing.T) {
	for yml, want := range map[string]string{
		"catalog: {zone: cat.invalid.}\nzones: [{origin: a.test., records: [\"@ NS ns1.a.test.\"]}]\n":             "",
		"catalog: {transfer: {allow: [127.0.0.1]}}\nzones: [{origin: a.test., records: [\"@ NS ns1.a.test.\"]}]\n": "field catalog.zone: missing",
		"catalog: {zone: a.test}\nzones: [{origin: a.test., records: [\"@ NS ns1.a.test.\"]}]\n":                   "a.test. is also configured as a zone",
		"catalogs: [{zone: cat.example., primaries: [\"192.0.2.1\"]}]\n":                                           "",
		"catalogs: [{primaries: [\"192.0.2.1\"]}]\n":                                                               "field catalogs[0].zone: missing",
		"catalogs: [{zone: cat.example., primaries: [\"192.0.2.1\"], file: x}]\n":                                  `unknown field "file"`,
	} {
		c, err := Parse([]byte("listen: 127.0.0.1:0\n" + yml))
		if err == nil {
			c.ApplyDefaults()
			err = c.Validate()
		}
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", yml, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want %q", yml, err, want)
		}
	}
	c, _ := Parse([]byte("listen: 127.0.0.1:0\ncatalog: {zone: cat.invalid.}\ncatalogs: [{zone: cat.example., primaries: [\"192.0.2.1\"]}]\nzones: [{origin: a.test., records: [\"@ NS ns1.a.test.\"]}]\n"))
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	recs := c.CatalogRecords([]string{"b.test.", "a.test."})
	x := c.WithCatalogs(recs, 7, map[string][]string{"cat.example.": {"m.test.", "a.test."}})
	var got []string
	for _, z := range x.Zones {
		got = append(got, z.Origin+"/"+z.FromCatalog)
	}
	if strings.Join(got, " ") != "a.test./ cat.invalid./ cat.example./ m.test./cat.example." {
		t.Errorf("expanded zones %v: want a.test. (configured wins), the produced and consumed catalogs, and m.test. from cat.example.", got)
	}
	if err := x.Validate(); err != nil {
		t.Errorf("the expanded configuration does not validate: %v", err)
	}
	if len(recs) != 4 || !strings.HasPrefix(recs[2], "") || !strings.Contains(strings.Join(recs, "\n"), ".zones 0 PTR a.test.") {
		t.Errorf("catalog records %v", recs)
	}
}
