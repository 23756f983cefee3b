package config

import (
	"strings"
	"testing"
)

// TestConfigYAMLErrorsNameFieldAndFix: type, indentation and tab errors name the line, the
// field and the fix (internal/yamlx), not only yaml.v3's message.
func TestConfigYAMLErrorsNameFieldAndFix(t *testing.T) {
	for in, want := range map[string]string{
		"max_udp_size: big\n":                        "line 1: max_udp_size: `big` is not a whole number",
		"zones:\n  - origin: a.test.\n    ttl: 1h\n": "line 3: zones[0].ttl: `1h` is not a whole number",
		"zones:\n  - origin: a.test.\n   ttl: 30\n":  "line 3: ttl: indented to column 4",
		"zones:\n\t- origin: a.test.\n":              "line 2: origin: a tab in the indentation",
	} {
		if _, err := Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}
