package l7

import (
	"strings"
	"testing"
)

// TestConfigYAMLErrorsNameFieldAndFix: type, indentation and tab errors name the line, the
// field and the fix (internal/yamlx), not only yaml.v3's message.
func TestConfigYAMLErrorsNameFieldAndFix(t *testing.T) {
	head := "listeners:\n  - address: 127.0.0.1:8080\n"
	for in, want := range map[string]string{
		head + "limits:\n  max_in_flight: many\n":    "line 4: limits.max_in_flight: `many` is not a whole number",
		head + "timeouts:\n  idle: soon\n":           "line 4: timeouts.idle: `soon` is not a duration",
		head + "   routes: []\n":                     "line 3: routes: indented to column 4",
		head + "admin:\n\taddress: 127.0.0.1:9901\n": "line 4: address: a tab in the indentation",
		head + "limits:\n  max_inflight: 3\n":        "line 4: limits.max_inflight: unknown field: did you mean `max_in_flight`?",
	} {
		if _, err := ParseConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}
