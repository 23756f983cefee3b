package edge

import (
	"strings"
	"testing"
)

// TestConfigYAMLErrorsNameFieldAndFix: type, indentation and tab errors name the line, the
// field and the fix (internal/yamlx), not only yaml.v3's message.
func TestConfigYAMLErrorsNameFieldAndFix(t *testing.T) {
	head := "origin: http://127.0.0.1:8000\n"
	for in, want := range map[string]string{
		head + "disable_fast_path: sometimes\n":        "line 2: disable_fast_path: `sometimes` is not true or false",
		head + "memory:\n  max_objects: lots\n":        "line 3: memory.max_objects: `lots` is not a whole number",
		head + "memory:\n  max_bytes: 1MiB\n   x: 1\n": "line 4: x: indented deeper than the line before",
		head + "admin:\n\tlisten: 127.0.0.1:9091\n":    "line 3: listen: a tab in the indentation",
	} {
		if _, err := ParseConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// TestAdminListenLoopbackDefault: an admin address without a host binds to loopback.
func TestAdminListenLoopbackDefault(t *testing.T) {
	c, err := ParseConfig([]byte("origin: http://127.0.0.1:8000\nadmin: {listen: \":9091\", token: t}\n"))
	if err != nil || c.Admin.Listen != "127.0.0.1:9091" {
		t.Errorf("%v %q, want 127.0.0.1:9091", err, c.Admin.Listen)
	}
}
