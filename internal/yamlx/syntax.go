package yamlx

import (
	"fmt"
	"strings"
)

// explainSyntax turns a yaml.v3 syntax error (reported at line yamlLine, often the line of the
// enclosing block) into an Error at the line that breaks the block structure, with its key and
// the fix.
func explainSyntax(b []byte, yamlLine int, msg string) error {
	lines := strings.Split(string(b), "\n")
	if n := tabLine(lines); n > 0 {
		return &Error{Line: n, Field: keyOf(lines[n-1]), Msg: "a tab in the indentation: YAML indents with spaces only: replace the tab with spaces"}
	}
	if n, why := misaligned(lines); n > 0 {
		return &Error{Line: n, Field: keyOf(lines[n-1]), Msg: why}
	}
	if yamlLine == 0 {
		yamlLine = colonInValue(lines)
	}
	fix := "check the indentation and quoting on this line and the one before"
	switch {
	case strings.Contains(msg, "mapping values are not allowed"):
		fix = "a value holds `: ` (quote it, e.g. \"a: b\"), or a key is indented differently from the keys beside it"
	case strings.Contains(msg, "could not find expected ':'"):
		fix = "a key needs a colon and a space after it (`port: 80`), or a quoted value is not closed"
	case strings.Contains(msg, "did not find expected"):
		fix = "an item or key here is indented differently from the ones beside it: align it with them (spaces only)"
	}
	field := ""
	if yamlLine >= 1 && yamlLine <= len(lines) {
		field = keyOf(lines[yamlLine-1])
	}
	return &Error{Line: yamlLine, Field: field, Msg: fmt.Sprintf("%s: %s", msg, fix)}
}

// tabLine is the first line whose indentation holds a tab, or 0.
func tabLine(lines []string) int {
	for i, l := range lines {
		ind := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if strings.Contains(ind, "\t") && strings.TrimSpace(l) != "" {
			return i + 1
		}
	}
	return 0
}

// keyOf is the mapping key a line starts (`- name: web` → name), or "".
func keyOf(l string) string {
	t := strings.TrimLeft(l, " \t")
	t = strings.TrimLeft(strings.TrimPrefix(t, "-"), " \t")
	k, _, ok := strings.Cut(t, ":")
	if !ok || strings.ContainsAny(k, "{[\"'#") {
		return ""
	}
	return strings.TrimSpace(k)
}

// level is one open block: the column its keys (or its `-` items) start at.
type level struct {
	col int
	seq bool
	key string // the first key of a mapping, to name it in a message
}

// misaligned finds the first line of block-style YAML whose indentation matches no open block
// (or goes deeper where no block opens), and says why. It gives up (0) on what it does not
// follow: flow collections over several lines and block scalars are skipped.
func misaligned(lines []string) (int, string) {
	stack := []level{{col: 0}}
	opens, scalarCol, depth := false, -1, 0
	for i, raw := range lines {
		t := strings.TrimLeft(raw, " ")
		col := len(raw) - len(t)
		if strings.TrimSpace(t) == "" || strings.HasPrefix(t, "#") || t == "---" {
			continue
		}
		if scalarCol >= 0 && col > scalarCol {
			continue // the content of a block scalar
		}
		scalarCol = -1
		if depth > 0 {
			depth += strings.Count(t, "[") + strings.Count(t, "{") - strings.Count(t, "]") - strings.Count(t, "}")
			continue
		}
		top := stack[len(stack)-1]
		switch {
		case col > top.col && opens:
			stack = append(stack, level{col: col, seq: strings.HasPrefix(t, "- ") || t == "-"})
		case col > top.col:
			return i + 1, fmt.Sprintf("indented deeper than the line before, which opens no block: align it with `%s` (column %d), spaces only", top.key, top.col+1)
		case col == top.col && opens && (strings.HasPrefix(t, "- ") || t == "-") && !top.seq:
			// `key:` followed by `- item` at the key's own column: a list, as YAML allows.
			stack = append(stack, level{col: col, seq: true})
		default:
			var popped level
			for len(stack) > 1 && stack[len(stack)-1].col > col {
				popped, stack = stack[len(stack)-1], stack[:len(stack)-1]
			}
			if top = stack[len(stack)-1]; top.col != col {
				near := top
				if popped.key != "" || top.key == "" {
					near = popped
				}
				return i + 1, fmt.Sprintf("indented to column %d, which lines up with no field above: align it with `%s` (column %d) or the key it belongs to, spaces only", col+1, near.key, near.col+1)
			}
		}
		top = stack[len(stack)-1]
		isItem := strings.HasPrefix(t, "- ") || t == "-"
		if top.seq && !isItem {
			return i + 1, fmt.Sprintf("a key at the column of the list's `-` items: indent it under the item it belongs to (column %d)", col+3)
		}
		body := t
		if isItem {
			body = strings.TrimLeft(strings.TrimPrefix(t, "-"), " ")
			if k := keyOf(t); k != "" {
				// The item's mapping: its keys line up with the first one.
				stack = append(stack, level{col: col + len(t) - len(body), key: k})
			}
		} else if top.key == "" {
			stack[len(stack)-1].key = keyOf(t)
		}
		value := strings.TrimSpace(stripComment(body))
		_, after, hasColon := strings.Cut(value, ": ")
		if !hasColon && strings.HasSuffix(value, ":") {
			after = ""
			hasColon = true
		}
		opens = value == "" || (hasColon && strings.TrimSpace(after) == "" && keyOf(body) != "")
		if hasColon && (strings.HasPrefix(after, "|") || strings.HasPrefix(after, ">")) {
			scalarCol = col
		}
		depth = strings.Count(value, "[") + strings.Count(value, "{") - strings.Count(value, "]") - strings.Count(value, "}")
	}
	return 0, ""
}

func stripComment(s string) string {
	if i := strings.Index(s, " #"); i >= 0 {
		return s[:i]
	}
	return s
}

// colonInValue is the first line whose plain value holds `: ` (a: b: c), or 0.
func colonInValue(lines []string) int {
	for i, l := range lines {
		body := strings.TrimLeft(strings.TrimPrefix(strings.TrimLeft(l, " "), "-"), " ")
		if keyOf(body) == "" {
			continue
		}
		_, v, _ := strings.Cut(stripComment(body), ": ")
		v = strings.TrimSpace(v)
		if v != "" && !strings.ContainsAny(v[:1], "\"'[{|>") && strings.Contains(v, ": ") {
			return i + 1
		}
	}
	return 0
}
