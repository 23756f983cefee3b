package yamlx

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Error is a configuration file error located in the file: what every stop's loader returns
// for YAML it cannot decode, so that each names the line, the field and the fix.
type Error struct {
	// Line is 1-based.
	Line int
	// Field is the field's path (vips[0].port), or the key on the line when the YAML does not
	// parse far enough to know the path.
	Field string
	// Msg says what is wrong and how to fix it.
	Msg string
}

// Error renders "line N: field: message" (the form control/config's FieldError uses).
func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
}

// Decode decodes the YAML document b into v strictly (an unknown field is an error) and
// explains what yaml.v3 reports: a type error names the field's path and the kind of value to
// write, an unknown field the fields that exist there, a syntax error the line that breaks the
// indentation (yaml.v3 often names the line of the enclosing block) and a tab in the
// indentation its line. An empty document returns io.EOF, as yaml.v3 does.
//
// A document larger than MaxFileBytes is refused before decoding, and one whose aliases expand
// past what yaml.v3 accepts (a "billion laughs" alias bomb) with one message at its largest
// alias, not one per expanded value.
func Decode(b []byte, v any) error {
	if len(b) > MaxFileBytes {
		return tooLarge(int64(len(b)))
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	err := dec.Decode(v)
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	var te *yaml.TypeError
	if errors.As(err, &te) || strings.Contains(err.Error(), "excessive aliasing") {
		var root yaml.Node
		_ = yaml.Unmarshal(b, &root)
		if bomb := aliasBomb(&root); bomb != nil {
			return bomb
		}
		if te == nil {
			return err
		}
		var errs []error
		seen := map[string]bool{}
		unknown := map[string]int{} // the same unknown key on one line: the next occurrence
		for _, m := range te.Errors {
			e := explainType(&root, reflect.TypeOf(v), m, unknown)
			// An alias repeats its value's errors: say each once.
			if !seen[e.Error()] {
				seen[e.Error()] = true
				errs = append(errs, e)
			}
		}
		return errors.Join(errs...)
	}
	if m := lineMsg.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		if isSyntax(m[2]) {
			return explainSyntax(b, n, m[2])
		}
		// An UnmarshalYAML error (a duration, a size) with its line: add the field.
		var root yaml.Node
		_ = yaml.Unmarshal(b, &root)
		match := func(v *yaml.Node) bool { return v.Kind == yaml.ScalarNode }
		if q := quoted.FindStringSubmatch(m[2]); q != nil {
			match = func(v *yaml.Node) bool { return v.Kind == yaml.ScalarNode && v.Value == q[1] }
		}
		if p := pathAtLine(&root, n, match); p != "" {
			return &Error{Line: n, Field: p, Msg: m[2]}
		}
		return err
	}
	if isSyntax(err.Error()) { // yaml.v3 gave no line
		return explainSyntax(b, 0, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return err
}

var (
	lineMsg     = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
	typeMsg     = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
	quoted      = regexp.MustCompile(`"([^"]*)"`)
	unknownMsg  = regexp.MustCompile(`^line (\d+): field (\S+) not found in type (\S+)$`)
	syntaxWords = []string{"mapping values are not allowed", "did not find expected", "could not find expected", "found character", "found a tab", "found unexpected", "block sequence entries are not allowed", "found undefined tag", "cannot start any token"}
)

func isSyntax(msg string) bool {
	for _, w := range syntaxWords {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// explainType turns one yaml.v3 type error message into an Error with the field and the fix.
// unknown counts the unknown keys explained so far by line and name: yaml.v3 reports them in
// document order, so the k-th report of a key on a line is its k-th occurrence there.
func explainType(root *yaml.Node, top reflect.Type, msg string, unknown map[string]int) error {
	if m := unknownMsg.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		at := m[1] + " " + m[2]
		parent := parentPathOfKey(root, n, m[2], unknown[at])
		unknown[at]++
		f := m[2]
		if parent != "" {
			f = parent + "." + m[2]
		}
		known := fieldsAt(top, parent)
		fix := "remove it or correct its name"
		if s := closest(m[2], known); s != "" {
			fix = fmt.Sprintf("did you mean `%s`?", s)
		} else if len(known) > 0 {
			fix += " (the fields here: " + strings.Join(known, ", ") + ")"
		}
		return &Error{Line: n, Field: f, Msg: "unknown field: " + fix}
	}
	m := typeMsg.FindStringSubmatch(msg)
	if m == nil {
		return errors.New(msg)
	}
	n, _ := strconv.Atoi(m[1])
	got := m[3]
	match := func(v *yaml.Node) bool { return v.Kind == yaml.ScalarNode && v.Value == m[3] }
	if got == "" {
		got = map[string]string{"seq": "a list", "map": "a mapping"}[m[2]]
		kind := map[string]yaml.Kind{"seq": yaml.SequenceNode, "map": yaml.MappingNode}[m[2]]
		match = func(v *yaml.Node) bool { return v.Kind == kind }
	} else {
		got = "`" + got + "`"
	}
	w := want(m[4])
	if m[2] == "int" && strings.HasPrefix(w, "a whole number: ") {
		// A number that does not fit (70000 for a port, -1 for a count).
		return &Error{Line: n, Field: pathAtLine(root, n, match), Msg: fmt.Sprintf("%s is out of range: %s", got, strings.TrimPrefix(w, "a whole number: "))}
	}
	return &Error{Line: n, Field: pathAtLine(root, n, match), Msg: fmt.Sprintf("%s is not %s", got, w)}
}

// want says what a Go type expects, with an example.
func want(goType string) string {
	switch goType {
	case "uint8", "uint16", "uint32", "uint64", "uint":
		bits := map[string]string{"uint8": "255", "uint16": "65535", "uint32": "4294967295"}[goType]
		if bits != "" {
			return "a whole number: write one in 0.." + bits + ", such as 80, without quotes"
		}
		return "a whole number: write one such as 80, without quotes"
	case "int", "int8", "int16", "int32", "int64":
		return "a whole number: write one such as 3, without quotes"
	case "float32", "float64":
		return "a number: write one such as 0.5"
	case "bool":
		return "true or false: write `true` or `false`"
	case "string":
		return "a single value: write one value after the colon (quote it when it holds `: ` or starts with [ or {)"
	case "time.Duration":
		return "a duration: write one with a unit such as 500ms, 30s or 5m"
	}
	if strings.HasPrefix(goType, "[]") {
		return "a list: write `- item` lines indented under the field, or [a, b]"
	}
	if strings.HasPrefix(goType, "map[") || strings.Contains(goType, ".") {
		return "a mapping: write `key: value` lines indented under the field, or {key: value}"
	}
	return "a " + goType
}
