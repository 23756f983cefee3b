// Package yamlx holds the small YAML value types every stop's configuration shares, so that a
// duration is written, checked and reported the same way in every file switchyard reads.
package yamlx

import (
	"fmt"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written as "500ms", "30s" or "5m" in YAML.
type Duration time.Duration

// UnmarshalYAML reads a Go duration string; errors name the line.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: parse duration %q: use a number with a unit such as 500ms, 30s or 5m", n.Line, n.Value)
	}
	if v < 0 {
		return fmt.Errorf("line %d: duration %q is negative: use a positive duration such as 30s", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration back in the same form.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D is the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
