package config

import "gopkg.in/yaml.v3"

// present reports whether the file writes the field at path (map keys and sequence indexes):
// `weight: 0` and a weight left out decode alike, and only the first is refused.
func (l locator) present(path ...any) bool {
	n := l.root
	if n == nil {
		return false
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, p := range path {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == p {
						next = n.Content[i+1]
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && p < len(n.Content) {
				next = n.Content[p]
			}
		}
		if next == nil {
			return false
		}
		n = next
	}
	return true
}
