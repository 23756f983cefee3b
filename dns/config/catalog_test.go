package config

import (
	"fmt"
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
		"catalogs: [{zone: cat.example., primaries: [\"192.0.2.1\"], groups: {gold: {tsig: nokey}}}]\n":            `groups.gold): field secondary.tsig: "nokey" is not among tsig_keys`,
		"catalogs: [{zone: cat.example., primaries: [\"192.0.2.1\"], groups: {gold: {primaries: [x]}}}]\n":         `groups.gold): field secondary.primaries: parse "x"`,
		"catalog: {zone: cat.invalid.}\nzones: [{origin: a.test., catalog: {group: gold, coo: cat2.example}}]\n":   "",
		"zones: [{origin: a.test., catalog: {group: gold}}]\n":                                                     "no catalog is produced",
		"catalog: {zone: cat.invalid.}\nzones: [{origin: a.test., catalog: {group: \"a b\"}}]\n":                   `catalog.group: "a b": use up to 255 letters`,
		"catalog: {zone: cat.invalid.}\nzones: [{origin: a.test., catalog: {coo: cat.invalid.}}]\n":                "this server's own catalog",
		"catalog: {zone: cat.invalid.}\nzones: [{origin: a.test., catalog: {}}]\n":                                 "empty; set group or coo",
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
	recs := c.CatalogRecords([]CatalogMember{{Zone: "b.test."}, {Zone: "a.test."}})
	x := c.WithCatalogs(recs, 7, map[string][]CatalogMember{"cat.example.": {{Zone: "m.test."}, {Zone: "a.test."}}})
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

// A consumed catalog's group chooses a member's primaries and key (fields left out are the
// catalog's); the produced catalog carries a member's group and coo beside its PTR.
func TestCatalogMemberProperties(t *testing.T) {
	c, err := Parse([]byte(`listen: 127.0.0.1:0
tsig_keys: [{name: gold-key, algorithm: hmac-sha256, secret: "MDEyMzQ1Njc4OWFiY2RlZg=="}]
catalog: {zone: cat.invalid.}
catalogs:
  - {zone: cat.example., primaries: ["192.0.2.1"], groups: {gold: {tsig: gold-key}, far: {primaries: ["192.0.2.9"]}}}
zones: [{origin: a.test., records: ["@ NS ns1.a.test."], catalog: {group: gold, coo: Cat2.Example}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	recs := strings.Join(c.CatalogRecords(c.CatalogMembers()), "\n")
	for _, want := range []string{".zones 0 PTR a.test.", `group.`, `.zones 0 TXT "gold"`, "coo.", ".zones 0 PTR cat2.example."} {
		if !strings.Contains(recs, want) {
			t.Errorf("catalog records %s: want %q", recs, want)
		}
	}
	x := c.WithCatalogs(nil, 1, map[string][]CatalogMember{"cat.example.": {
		{Zone: "g.test.", Groups: []string{"gold"}}, {Zone: "f.test.", Groups: []string{"far", "other"}}, {Zone: "p.test.", Groups: []string{"unknown"}}}})
	if err := x.Validate(); err != nil {
		t.Fatalf("the expanded configuration does not validate: %v", err)
	}
	got := map[string]string{}
	for _, z := range x.Zones {
		if z.FromCatalog != "" {
			got[z.Origin] = fmt.Sprintf("%v %s", z.Secondary.Primaries, z.Secondary.TSIG)
		}
	}
	want := map[string]string{"g.test.": "[192.0.2.1:53] gold-key", "f.test.": "[192.0.2.9:53] ", "p.test.": "[192.0.2.1:53] "}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("members' secondary blocks %v, want %v", got, want)
	}
}

// A server keeps the configuration as loaded and its catalogs expanded: the expanded zones
// begin with the loaded ones unchanged (catalog properties included, which the expanded
// configuration validates without its catalog block), so both share one copy of each
// (SharingZones), and what is read from the shared copy still makes the same catalog.
func TestSharingZones(t *testing.T) {
	c, err := Parse([]byte("listen: 127.0.0.1:0\ncatalog: {zone: cat.invalid.}\nzones:\n" +
		"  - {origin: a.test., records: [\"@ NS ns1.a.test.\"], catalog: {group: gold}}\n" +
		"  - {origin: b.test., records: [\"@ NS ns1.b.test.\"]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	recs := c.CatalogRecords(c.CatalogMembers())
	x := c.WithCatalogs(recs, 1, nil)
	if err := x.Validate(); err != nil {
		t.Fatalf("the expanded configuration, whose zones keep their catalog fields, does not validate: %v", err)
	}
	base := c.SharingZones(x)
	if &base.Zones[0] != &x.Zones[0] || len(base.Zones) != 2 || cap(base.Zones) != 2 {
		t.Fatalf("base zones %p (len %d cap %d), expanded %p: want the expanded array's first two, clipped",
			&base.Zones[0], len(base.Zones), cap(base.Zones), &x.Zones[0])
	}
	if got := base.CatalogRecords(base.CatalogMembers()); strings.Join(got, "\n") != strings.Join(recs, "\n") {
		t.Errorf("catalog from the shared zones:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(recs, "\n"))
	}
	if err := base.Validate(); err != nil {
		t.Errorf("the shared base does not validate again (a reload does): %v", err)
	}
	if y := base.WithCatalogs(recs, 2, nil); &y.Zones[0] == &x.Zones[0] {
		t.Error("a second expansion writes into the first's zones; want a copy")
	}
}
