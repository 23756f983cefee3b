package yamlx

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestDuration(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	if err := yaml.Unmarshal([]byte("d: 1m30s\n"), &v); err != nil || v.D.D() != 90*time.Second {
		t.Fatalf("%v %v", v.D, err)
	}
	for in, want := range map[string]string{"d: soon\n": `line 1: parse duration "soon"`, "\nd: -1s\n": "line 2: duration \"-1s\" is negative"} {
		if err := yaml.Unmarshal([]byte(in), &v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
	out, _ := yaml.Marshal(v)
	if !strings.Contains(string(out), "d: 1m30s") {
		t.Errorf("marshal: %s", out)
	}
}
