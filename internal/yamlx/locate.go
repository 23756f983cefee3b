package yamlx

import (
	"reflect"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/internal/editdist"
)

// pathAtLine is the path (vips[0].port) of the value on line n that match accepts, or "".
func pathAtLine(root *yaml.Node, n int, match func(*yaml.Node) bool) string {
	p, _ := find(root, "", n, match)
	return p
}

// parentPathOfKey is the path of the mapping holding the skip-th key named key on line n ("" at
// the top). The key's name matters on a line holding a flow mapping ({type: tcp, intervl: 1s}):
// its first key belongs to the enclosing mapping, the others to the flow mapping.
func parentPathOfKey(root *yaml.Node, n int, key string, skip int) string {
	var out string
	var walk func(nd *yaml.Node, path string) bool
	walk = func(nd *yaml.Node, path string) bool {
		switch nd.Kind {
		case yaml.DocumentNode:
			for _, c := range nd.Content {
				if walk(c, path) {
					return true
				}
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(nd.Content); i += 2 {
				k, v := nd.Content[i], nd.Content[i+1]
				if k.Line == n && k.Value == key {
					if skip == 0 {
						out = path
						return true
					}
					skip--
				}
				p := k.Value
				if path != "" {
					p = path + "." + k.Value
				}
				if walk(v, p) {
					return true
				}
			}
		case yaml.SequenceNode:
			for i, c := range nd.Content {
				if walk(c, path+"["+strconv.Itoa(i)+"]") {
					return true
				}
			}
		}
		return false
	}
	walk(root, "")
	return out
}

// find walks the tree for line n: the path of the outermost value there that match accepts.
func find(nd *yaml.Node, path string, n int, match func(*yaml.Node) bool) (string, bool) {
	hit := func(v *yaml.Node) bool { return v.Line == n && (match == nil || match(v)) }
	switch nd.Kind {
	case yaml.DocumentNode:
		for _, c := range nd.Content {
			if p, ok := find(c, path, n, match); ok {
				return p, true
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(nd.Content); i += 2 {
			k, v := nd.Content[i], nd.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if hit(v) {
				return p, true
			}
			if q, ok := find(v, p, n, match); ok {
				return q, true
			}
		}
	case yaml.SequenceNode:
		for i, c := range nd.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			if hit(c) {
				return p, true
			}
			if q, ok := find(c, p, n, match); ok {
				return q, true
			}
		}
	}
	return "", false
}

// fieldsAt lists the YAML field names of the struct at path (vips[0].health) inside type t.
func fieldsAt(t reflect.Type, path string) []string {
	for _, part := range strings.Split(path, ".") {
		if part == "" {
			continue
		}
		name, idxs := part, 0
		if i := strings.IndexByte(part, '['); i >= 0 {
			name, idxs = part[:i], strings.Count(part, "[")
		}
		switch t = deref(t); t.Kind() {
		case reflect.Struct:
			f, ok := fieldByTag(t, name)
			if !ok {
				return nil
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return nil
		}
		for ; idxs > 0; idxs-- {
			if t = deref(t); t.Kind() != reflect.Slice && t.Kind() != reflect.Array {
				return nil
			}
			t = t.Elem()
		}
	}
	t = deref(t)
	if t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	structFields(t, func(name string, _ reflect.StructField) bool { out = append(out, name); return false })
	return out
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// structFields calls f with the YAML name of every field of t (inline structs included) until
// f returns true.
func structFields(t reflect.Type, f func(string, reflect.StructField) bool) bool {
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !sf.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") {
			if it := deref(sf.Type); it.Kind() == reflect.Struct && structFields(it, f) {
				return true
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		if f(name, sf) {
			return true
		}
	}
	return false
}

func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	var found reflect.StructField
	ok := structFields(t, func(n string, sf reflect.StructField) bool {
		if n == name {
			found = sf
			return true
		}
		return false
	})
	return found, ok
}

// closest is the known name nearest to got, when near enough to be a typo.
func closest(got string, known []string) string {
	best, bestD := "", 1<<30
	for _, k := range known {
		if d := editdist.Distance(got, k); d < bestD {
			best, bestD = k, d
		}
	}
	if bestD <= max(2, len(got)/3) {
		return best
	}
	return ""
}
