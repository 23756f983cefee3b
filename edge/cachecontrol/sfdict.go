package cachecontrol

import "strings"

// Targeted cache-control fields are Structured Field Dictionaries (RFC 9213 2.1, RFC 8941 3.2);
// a field that does not parse as one, or whose delta-seconds directives are not Integers, is
// ignored as a whole (RFC 9213 2.2), and Cache-Control applies. validTargeted checks the joined
// field lines.

// integerDirectives must carry an Integer in a targeted field.
var integerDirectives = map[string]bool{"max-age": true, "s-maxage": true,
	"stale-while-revalidate": true, "stale-if-error": true}

// validTargeted reports whether v is a valid, non-empty Dictionary with Integer delta-seconds.
func validTargeted(v string) bool {
	p := sfParser{s: v}
	p.ows()
	if p.done() {
		return false
	}
	for {
		key, ok := p.key()
		if !ok {
			return false
		}
		kind := byte('?') // a member without a value is Boolean true
		if p.peek() == '=' {
			p.i++
			if kind, ok = p.bareItem(); !ok {
				return false
			}
		}
		if integerDirectives[key] && kind != 'i' {
			return false
		}
		if !p.params() {
			return false
		}
		p.ows()
		if p.done() {
			return true
		}
		if p.peek() != ',' {
			return false
		}
		p.i++
		p.ows()
		if p.done() {
			return false // a trailing comma
		}
	}
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) done() bool { return p.i >= len(p.s) }

func (p *sfParser) peek() byte {
	if p.done() {
		return 0
	}
	return p.s[p.i]
}

func (p *sfParser) ows() {
	for !p.done() && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// key reads lcalpha / "*" followed by lcalpha, DIGIT, "_", "-", ".", "*".
func (p *sfParser) key() (string, bool) {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z' || c == '*') {
		return "", false
	}
	for !p.done() {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-.*", c) >= 0) {
			break
		}
		p.i++
	}
	return p.s[start:p.i], true
}

// bareItem reads one bare item and returns its kind: 'i' integer, 'd' decimal, 's' string,
// 't' token, 'b' byte sequence, '?' boolean.
func (p *sfParser) bareItem() (byte, bool) {
	switch c := p.peek(); {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		p.i++
		for !p.done() {
			switch c := p.s[p.i]; {
			case c == '\\':
				if p.i+1 >= len(p.s) || (p.s[p.i+1] != '"' && p.s[p.i+1] != '\\') {
					return 0, false
				}
				p.i += 2
			case c == '"':
				p.i++
				return 's', true
			case c < 0x20 || c > 0x7e:
				return 0, false
			default:
				p.i++
			}
		}
		return 0, false
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		for !p.done() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
			p.i++
		}
		return 't', true
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return 0, false
		}
		for _, b := range p.s[p.i+1 : p.i+1+end] {
			if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '+' || b == '/' || b == '=') {
				return 0, false
			}
		}
		p.i += end + 2
		return 'b', true
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			p.i += 2
			return '?', true
		}
	}
	return 0, false
}

// number reads an Integer (up to 15 digits) or a Decimal (up to 12.3 digits).
func (p *sfParser) number() (byte, bool) {
	if p.peek() == '-' {
		p.i++
	}
	start, dot := p.i, -1
	for !p.done() {
		c := p.s[p.i]
		if c == '.' && dot < 0 {
			dot = p.i
		} else if c < '0' || c > '9' {
			break
		}
		p.i++
	}
	n := p.i - start
	switch {
	case n == 0 || dot == p.i-1 || dot == start:
		return 0, false
	case dot < 0:
		return 'i', n <= 15
	default:
		return 'd', dot-start <= 12 && p.i-dot-1 <= 3
	}
}

// params reads any ";key[=bare-item]" parameters.
func (p *sfParser) params() bool {
	for p.peek() == ';' {
		p.i++
		p.ows()
		if _, ok := p.key(); !ok {
			return false
		}
		if p.peek() == '=' {
			p.i++
			if _, ok := p.bareItem(); !ok {
				return false
			}
		}
	}
	return true
}

func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}
