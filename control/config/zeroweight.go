package config

import "bytes"

// mayHaveZeroWeight reports whether b has a line that may set a weight of 0 (block or flow
// style): what the regular expression `(?m)\bweight:\s*0+\s*([#,}\]]|$)` matches, by a scan for
// "weight:" (the expression took a tenth of a 4,096-VIP start).
func mayHaveZeroWeight(b []byte) bool {
	key := []byte("weight:")
	for at := 0; ; {
		i := bytes.Index(b[at:], key)
		if i < 0 {
			return false
		}
		i += at
		at = i + len(key)
		if i > 0 && isWordByte(b[i-1]) {
			continue // \b: not the start of a word
		}
		j := skipSpace(b, at)
		k := j
		for k < len(b) && b[k] == '0' {
			k++
		}
		if k == j {
			continue // 0+: no zero
		}
		for ; k < len(b) && isSpace(b[k]); k++ {
			if b[k] == '\n' {
				return true // $ before a newline
			}
		}
		if k == len(b) || bytes.IndexByte([]byte("#,}]"), b[k]) >= 0 {
			return true
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// isSpace is the regular expressions' \s: [\t\n\f\r ].
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' }

// isWordByte is the regular expressions' \w: [0-9A-Za-z_].
func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}
