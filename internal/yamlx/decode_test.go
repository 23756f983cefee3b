package yamlx

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

type tBackend struct {
	Address string `yaml:"address"`
	Weight  uint32 `yaml:"weight"`
}

type tHealth struct {
	Type     string   `yaml:"type"`
	Interval Duration `yaml:"interval"`
}

type tVIP struct {
	Name     string     `yaml:"name"`
	Port     uint16     `yaml:"port"`
	Health   *tHealth   `yaml:"health"`
	Backends []tBackend `yaml:"backends"`
}

type tConfig struct {
	Interface string        `yaml:"interface"`
	Timeout   time.Duration `yaml:"timeout"`
	Enabled   bool          `yaml:"enabled"`
	VIPs      []tVIP        `yaml:"vips"`
}

// TestDecodeExplains: every kind of mistake names its line, its field and the fix.
func TestDecodeExplains(t *testing.T) {
	head := "interface: eth0\nvips:\n  - name: web\n"
	cases := []struct{ name, yaml, want string }{
		{"type", head + "    port: eighty\n", "line 4: vips[0].port: `eighty` is not a whole number: write one in 0..65535"},
		{"negative", head + "    backends:\n      - address: x\n        weight: -1\n", "line 6: vips[0].backends[0].weight: `-1` is out of range: write one in 0..4294967295"},
		{"list for a string", "interface: [a, b]\n", "line 1: interface: a list is not a single value"},
		{"scalar for a list", "vips: 3\n", "line 1: vips: `3` is not a list"},
		{"bool", "enabled: yes please\n", "line 1: enabled: `yes please` is not true or false"},
		{"go duration", "timeout: soon\n", "line 1: timeout: `soon` is not a duration: write one with a unit such as 500ms"},
		{"yamlx duration", head + "    health: {type: tcp, interval: soon}\n", "line 4: vips[0].health.interval: parse duration \"soon\""},
		{"unknown field", head + "    prot: 80\n", "line 4: vips[0].prot: unknown field: did you mean `port`?"},
		{"unknown field far off", head + "    colour: red\n", "line 4: vips[0].colour: unknown field: remove it or correct its name (the fields here: name, port, health, backends)"},
		{"unknown top field", "interfce: eth0\n", "line 1: interfce: unknown field: did you mean `interface`?"},
		{"key less indented", head + "    port: 80\n   backends: []\n", "line 5: backends: indented to column 4, which lines up with no field above: align it with `name` (column 5)"},
		{"key more indented", head + "     port: 80\n", "line 4: port: indented deeper than the line before, which opens no block: align it with `name` (column 5)"},
		{"top key indented", "interface: eth0\n  vips:\n", "line 2: vips: indented deeper than the line before"},
		{"key at the dash", head + "  port: 80\n", "line 4: port: a key at the column of the list's `-` items: indent it under the item it belongs to (column 5)"},
		{"tab", head + "\tport: 80\n", "line 4: port: a tab in the indentation: YAML indents with spaces only"},
		{"tab before dash", "interface: eth0\nvips:\n\t- name: web\n", "line 3: name: a tab in the indentation"},
		{"colon in value", "interface: a: b\n", "line 1: interface: mapping values are not allowed in this context: a value holds `: ` (quote it"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var v tConfig
			err := Decode([]byte(c.yaml), &v)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%q:\n got %v\nwant %q", c.yaml, err, c.want)
			}
			var ye *Error
			if err != nil && !errors.As(err, &ye) {
				t.Errorf("%v is not a *yamlx.Error", err)
			}
		})
	}
	var v tConfig
	if err := Decode(nil, &v); !errors.Is(err, io.EOF) {
		t.Errorf("empty: %v, want io.EOF", err)
	}
	if err := Decode([]byte(head+"    port: 80\n    backends:\n    - {address: a, weight: 2}\n"), &v); err != nil || v.VIPs[0].Backends[0].Weight != 2 {
		t.Errorf("valid: %v %+v", err, v)
	}
}

// TestMisalignedKeepsValidFiles: the indentation check finds nothing wrong in the YAML the
// repository ships (docs, examples, testdata), so it never points at a line that is fine.
func TestMisalignedKeepsValidFiles(t *testing.T) {
	var files []string
	for _, g := range []string{"../../docs/*.md", "../../deploy/etc/*.yaml", "../../*/testdata/*.yaml", "../../*/*/testdata/*.yaml"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	block := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs := []string{string(b)}
		if strings.HasSuffix(f, ".md") {
			docs = nil
			for _, m := range block.FindAllStringSubmatch(string(b), -1) {
				docs = append(docs, m[1])
			}
		}
		for _, d := range docs {
			n++
			if line, why := misaligned(strings.Split(d, "\n")); line > 0 {
				t.Errorf("%s: a valid document flagged at its line %d (%s):\n%s", f, line, why, d)
			}
		}
	}
	if n < 5 {
		t.Fatalf("only %d YAML documents found to check", n)
	}
}

// An unknown key inside a flow mapping is named at its own path, not at the key that opens the
// mapping on the same line.
func TestDecodeUnknownInFlowMapping(t *testing.T) {
	head := "interface: eth0\nvips:\n  - name: web\n"
	for _, c := range []struct{ yaml, want string }{
		{head + "    health: {type: tcp, intervl: 1s}\n", "line 4: vips[0].health.intervl: unknown field: did you mean `interval`?"},
		{"vips: [{name: web, backends: [{address: a, wieght: 2}]}]\n", "line 1: vips[0].backends[0].wieght: unknown field: did you mean `weight`?"},
		{"vips: [{name: a, prot: 1}, {name: b, prot: 2}]\n", "line 1: vips[1].prot: unknown field"},
	} {
		var v tConfig
		if err := Decode([]byte(c.yaml), &v); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %q", c.yaml, err, c.want)
		}
	}
}

// An alias bomb ("billion laughs") is refused with one message at its largest alias, whether
// its values have the type of the fields (yaml.v3 stops decoding it) or not (yaml.v3 reports a
// type error per expanded value).
func TestDecodeAliasBomb(t *testing.T) {
	bomb := func(first string) string {
		s := first + ": &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\ngroups:\n"
		for c, prev := 'b', 'a'; c <= 'i'; c, prev = c+1, c {
			s += fmt.Sprintf("  %c: &%c [%s]\n", c, c, strings.TrimSuffix(strings.Repeat("*"+string(prev)+", ", 9), ", "))
		}
		return s
	}
	type wrongType struct {
		Records []string            `yaml:"records"`
		Groups  map[string][]string `yaml:"groups"`
	}
	type rightType struct {
		Records []string       `yaml:"records"`
		Groups  map[string]any `yaml:"groups"`
	}
	for _, c := range []struct {
		name string
		v    any
	}{{"type errors", &wrongType{}}, {"decodable", &rightType{}}} {
		err := Decode([]byte(bomb("records")), c.v)
		if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "line 10: *h: refuse the aliases") || !strings.Contains(err.Error(), "alias bomb") {
			t.Errorf("%s: %v; want one line naming the alias bomb at line 10", c.name, err)
		}
	}
	// Anchors used a few times are fine, and a type error they repeat is said once.
	small := "records: &r [a, b]\ngroups:\n  x: *r\n  y: *r\n"
	var ok struct {
		Records []string            `yaml:"records"`
		Groups  map[string][]string `yaml:"groups"`
	}
	if err := Decode([]byte(small), &ok); err != nil || len(ok.Groups["y"]) != 2 {
		t.Errorf("small aliases: %v %+v", err, ok)
	}
	var bad struct {
		Records []string          `yaml:"records"`
		Groups  map[string]string `yaml:"groups"`
	}
	if err := Decode([]byte(small), &bad); err == nil || strings.Count(err.Error(), "is not a single value") != 1 {
		t.Errorf("a type error repeated by aliases: %v; want it said once", err)
	}
}

// A configuration past MaxFileBytes is refused before it is decoded (or, from a file, read),
// naming its size, the limit and the fix; one at the limit is read.
func TestSizeLimit(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yaml")
	b := []byte("interface: eth0\n" + strings.Repeat("# padding\n", MaxFileBytes/10))
	if err := os.WriteFile(big, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(big)
	want := fmt.Sprintf("%d bytes, over the limit of %d (16 MiB)", len(b), MaxFileBytes)
	if err == nil || !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), big) {
		t.Errorf("ReadFile of %d bytes: %v; want %q naming the file", len(b), err, want)
	}
	var v tConfig
	if err := Decode(b, &v); err == nil || !errors.Is(err, ErrTooLarge) {
		t.Errorf("Decode of %d bytes: %v; want ErrTooLarge", len(b), err)
	}
	ok := filepath.Join(dir, "ok.yaml")
	os.WriteFile(ok, b[:MaxFileBytes], 0o600)
	if got, err := ReadFile(ok); err != nil || len(got) != MaxFileBytes {
		t.Errorf("ReadFile at the limit: %d bytes, %v", len(got), err)
	}
}
