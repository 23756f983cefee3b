package h1

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// The differential oracle: a deliberately plain, strict reader of RFC 9112 written from the
// grammar, line by line with the strings package, sharing no code with the parser. Whatever the
// parser accepts must mean the same to it; whatever it refuses the parser must refuse.

// refMessage is what the reference reads from a request head.
type refMessage struct {
	method, target, version string
	fields                  [][2]string
	contentLength           int64 // -1: none
	chunked, upgrade        bool
}

const refTchars = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

func refToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune(refTchars, rune(s[i])) {
			return false
		}
	}
	return true
}

// refFieldValue: SP, HTAB, VCHAR and obs-text (RFC 9110 5.5).
func refFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == ' ' || c == '\t' || (c >= 0x21 && c <= 0x7e) || c >= 0x80) {
			return false
		}
	}
	return true
}

// refReadHead reads a whole request head (through its empty line); ok false means refused.
func refReadHead(head string) (m refMessage, ok bool) { return refReadHeadLine(head, true) }

// refReadHeadLine reads a head, checking the request line only when requestLine is set (the
// guard leaves that line to net/http: it only refuses control characters in it).
func refReadHeadLine(head string, requestLine bool) (m refMessage, ok bool) {
	if !strings.HasSuffix(head, "\r\n\r\n") {
		return m, false
	}
	lines := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
	for _, l := range lines {
		if strings.ContainsAny(l, "\r\n") {
			return m, false // a bare CR or LF
		}
	}
	if !requestLine {
		if lines[0] == "" || !refFieldValue(lines[0]) {
			return m, false
		}
		lines[0] = "X / HTTP/1.1"
	}
	parts := strings.Split(lines[0], " ")
	if len(parts) != 3 || !refToken(parts[0]) || parts[1] == "" {
		return m, false
	}
	for i := 0; i < len(parts[1]); i++ {
		if c := parts[1][i]; c <= 0x20 || c == 0x7f {
			return m, false
		}
	}
	v := parts[2]
	if len(v) != 8 || !strings.HasPrefix(v, "HTTP/") || v[6] != '.' || !strings.ContainsRune("0123456789", rune(v[5])) || !strings.ContainsRune("0123456789", rune(v[7])) {
		return m, false
	}
	m.method, m.target, m.version, m.contentLength = parts[0], parts[1], v, -1
	var cls, tes []string
	for _, l := range lines[1:] {
		name, value, found := strings.Cut(l, ":")
		if !found || !refToken(name) {
			return m, false // also obs-fold: a line starting with SP or HTAB has no token name
		}
		value = strings.Trim(value, " \t")
		if !refFieldValue(value) {
			return m, false
		}
		m.fields = append(m.fields, [2]string{name, value})
		switch strings.ToLower(name) {
		case "content-length":
			cls = append(cls, value)
		case "transfer-encoding":
			tes = append(tes, value)
		case "upgrade":
			m.upgrade = true
		}
	}
	switch {
	case len(cls) > 0 && len(tes) > 0, len(cls) > 1:
		return m, false
	case len(tes) > 0:
		codings := strings.Split(strings.Join(tes, ","), ",")
		for i, c := range codings {
			c = strings.Trim(c, " \t")
			last := i == len(codings)-1
			if !refToken(c) || strings.EqualFold(c, "chunked") != last {
				return m, false
			}
		}
		m.chunked = true
	case len(cls) == 1:
		if len(cls[0]) == 0 || len(cls[0]) > 18 || strings.Trim(cls[0], "0123456789") != "" {
			return m, false
		}
		m.contentLength, _ = strconv.ParseInt(cls[0], 10, 64)
	}
	return m, true
}

// refChunkExt checks chunk extensions: *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted ) ] ).
func refChunkExt(s string) bool {
	ows := func() { s = strings.TrimLeft(s, " \t") }
	token := func() bool {
		n := 0
		for n < len(s) && strings.ContainsRune(refTchars, rune(s[n])) {
			n++
		}
		s = s[n:]
		return n > 0
	}
	for {
		if s == "" {
			return true
		}
		ows()
		if s == "" || s[0] != ';' {
			return false
		}
		s = s[1:]
		ows()
		if !token() {
			return false
		}
		rest := strings.TrimLeft(s, " \t")
		if !strings.HasPrefix(rest, "=") {
			if rest == "" && s != "" {
				return false // whitespace must lead to "=" or ";"
			}
			continue
		}
		s = rest[1:]
		ows()
		if strings.HasPrefix(s, `"`) {
			i := 1
			for ; i < len(s) && s[i] != '"'; i++ {
				c := s[i]
				if c == '\\' {
					i++
					if i == len(s) {
						return false
					}
					c = s[i]
					if !(c == '\t' || (c >= 0x20 && c != 0x7f)) {
						return false
					}
					continue
				}
				if !(c == '\t' || c == ' ' || c == 0x21 || (c >= 0x23 && c <= 0x5b) || (c >= 0x5d && c <= 0x7e) || c >= 0x80) {
					return false
				}
			}
			if i >= len(s) {
				return false
			}
			s = s[i+1:]
			if s != "" && s[0] != ' ' && s[0] != '\t' && s[0] != ';' {
				return false
			}
		} else if !token() {
			return false
		}
	}
}

// refChunked reads a chunked body at the start of b: its data, the canonical framing of it, the
// bytes it took, and the verdict ("ok", "refused" or "incomplete").
func refChunked(b string) (data, canonical string, n int, verdict string) {
	var d, c strings.Builder
	pos := 0
	// line returns the next line without CRLF, "" verdict when whole.
	line := func(limit int) (string, string) {
		i := strings.Index(b[pos:], "\r\n")
		if i < 0 {
			if strings.ContainsAny(strings.TrimSuffix(b[pos:], "\r"), "\r\n") || len(b)-pos >= limit {
				return "", "refused"
			}
			return "", "incomplete"
		}
		l := b[pos : pos+i]
		if strings.ContainsAny(l, "\r\n") || i+2 > limit {
			return "", "refused"
		}
		pos += i + 2
		return l, ""
	}
	for {
		l, v := line(4096)
		if v != "" {
			return "", "", 0, v
		}
		digits := len(l) - len(strings.TrimLeft(l, "0123456789abcdefABCDEF"))
		if digits == 0 || digits > 16 || !refChunkExt(l[digits:]) {
			return "", "", 0, "refused"
		}
		size, err := strconv.ParseUint(l[:digits], 16, 64)
		if err != nil || size > 1<<63-1 {
			return "", "", 0, "refused"
		}
		if size == 0 {
			break
		}
		avail := uint64(len(b) - pos)
		if avail < size+2 {
			tail := b[pos+int(min(avail, size)):]
			if avail <= size || strings.HasPrefix("\r\n", tail) {
				return "", "", 0, "incomplete"
			}
			return "", "", 0, "refused"
		}
		if b[pos+int(size):pos+int(size)+2] != "\r\n" {
			return "", "", 0, "refused"
		}
		d.WriteString(b[pos : pos+int(size)])
		fmt.Fprintf(&c, "%x\r\n%s\r\n", size, b[pos:pos+int(size)])
		pos += int(size) + 2
	}
	trailerStart := pos
	for {
		l, v := line(16<<10 - (pos - trailerStart))
		if v != "" {
			return "", "", 0, v
		}
		if l == "" {
			break
		}
		name, value, found := strings.Cut(l, ":")
		if !found || !refToken(name) || !refFieldValue(value) {
			return "", "", 0, "refused"
		}
	}
	c.WriteString("0\r\n\r\n")
	return d.String(), c.String(), pos, "ok"
}

// Seeds: the classic smuggling shapes.
var headSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
	"POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n",
	"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
	"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
	"GET / HTTP/1.1\r\nX-A: b\r\n folded\r\n\r\n",
	"GET / HTTP/1.1\r\nX-A: b\r\n\tfolded\r\n\r\n",
	"GET / HTTP/1.1\r\nX-A: b\rc\r\n\r\n",
	"GET / HTTP/1.1\nHost: a\n\n",
	"GET / HTTP/1.1\r\nHost: a\n\r\n",
	"GET / HTTP/1.1\r\nX-A: b\x00c\r\n\r\n",
	"GET / HTTP/1.1\r\nX-A : b\r\n\r\n",
	"GET / HTTP/1.1\r\n X-A: b\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding:\tchunked \r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: \xc2\xa0chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: ,chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\x0b\r\n\r\n",
	"GET  / HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1 \r\n\r\n",
	"GET /\x7f HTTP/1.1\r\n\r\n",
	"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
	"GET / HTTP/1.1\r\n: empty\r\n\r\n",
}

var chunkSeeds = []string{
	"5\r\nhello\r\n0\r\n\r\n",
	"5;a=b;c=\"d\\\"e\"\r\nhello\r\n0\r\nT: v\r\n\r\n",
	"5\nhello\r\n0\r\n\r\n",
	"5\r\nhello\n0\r\n\r\n",
	" 5\r\nhello\r\n0\r\n\r\n",
	"5 \r\nhello\r\n0\r\n\r\n",
	"5 ;a\r\nhello\r\n0\r\n\r\n",
	"\r\n5\r\nhello\r\n0\r\n\r\n",
	"5\r\nhello0\r\n\r\n",
	"3\r\nabc110\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
	"0\r\nbad trailer\r\n\r\n",
	"0\r\n folded: x\r\n\r\n",
	"0\r\nX: a\x00\r\n\r\n",
	"10000000000000000\r\nx\r\n0\r\n\r\n",
	"8000000000000000\r\nx\r\n0\r\n\r\n",
	"ffffffffffffffff\r\n",
	"7fffffffffffffff\r\n",
	"0000000000000001\r\nx\r\n0\r\n\r\n",
	"+5\r\nhello\r\n0\r\n\r\n",
	"0x5\r\nhello\r\n0\r\n\r\n",
	"5\r\r\nhello\r\n0\r\n\r\n",
	"0\r\n\r",
	"5;\r\nhello\r\n0\r\n\r\n",
}

func FuzzParseHead(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		end := HeadEnd(in, 0)
		if end < 0 {
			return
		}
		var h Head
		rej := ParseHead(in[:end], &h)
		var method, target, version []byte
		ok := rej == nil
		if ok {
			method, target, version, ok = ParseRequestLine(h.Line)
		}
		ref, refOK := refReadHead(string(in[:end]))
		if ok != refOK {
			t.Fatalf("%q: parser accepts %v (%v), reference %v", in[:end], ok, rej, refOK)
		}
		if !ok {
			return
		}
		if string(method) != ref.method || string(target) != ref.target || string(version) != ref.version {
			t.Fatalf("%q: request line %q %q %q, reference %q %q %q", in[:end], method, target, version, ref.method, ref.target, ref.version)
		}
		if len(h.Fields) != len(ref.fields) {
			t.Fatalf("%q: %d fields, reference %d", in[:end], len(h.Fields), len(ref.fields))
		}
		for i, f := range h.Fields {
			if string(f.Name) != ref.fields[i][0] || string(f.Value) != ref.fields[i][1] {
				t.Fatalf("%q: field %d %q: %q, reference %q", in[:end], i, f.Name, f.Value, ref.fields[i])
			}
		}
		if h.ContentLength != ref.contentLength || h.Chunked != ref.chunked || h.Upgrade != ref.upgrade {
			t.Fatalf("%q: framing CL %d chunked %v upgrade %v, reference %d %v %v", in[:end], h.ContentLength, h.Chunked, h.Upgrade, ref.contentLength, ref.chunked, ref.upgrade)
		}
	})
}

func FuzzChunked(f *testing.F) {
	for _, s := range chunkSeeds {
		f.Add([]byte(s), uint8(0), uint8(0))
		f.Add([]byte(s+"GET /next HTTP/1.1\r\n\r\n"), uint8(2), uint8(1))
	}
	for _, tc := range invalidChunked {
		f.Add([]byte(tc.in), uint8(3), uint8(5))
	}
	f.Fuzz(func(t *testing.T, in []byte, piece, dstSize uint8) {
		p, ds := int(piece)%16+1, int(dstSize)%32+1
		if piece >= 240 {
			p = len(in) + 1 // all at once
		}
		var d Chunked
		dst := make([]byte, ds)
		var out []byte
		n, done := 0, false
		var rej *Rejection
	feed:
		for off := 0; ; {
			src := in[off:min(off+p, len(in))]
			for {
				nd, ns, dn, r := d.Feed(dst, src)
				out = append(out, dst[:nd]...)
				src, off, n = src[ns:], off+ns, off+ns
				if r != nil || dn {
					rej, done = r, dn
					break feed
				}
				if len(src) == 0 && nd < len(dst) {
					break
				}
			}
			if off == len(in) {
				// Flush what is pending for a body ending exactly at the end of the input.
				for {
					nd, _, dn, r := d.Feed(dst, nil)
					out = append(out, dst[:nd]...)
					if dn || r != nil || nd == 0 {
						rej, done = r, dn
						break feed
					}
				}
			}
		}
		data, canonical, refN, verdict := refChunked(string(in))
		switch verdict {
		case "ok":
			if !done || n != refN || string(out) != canonical {
				t.Fatalf("%q: decoder done %v at %d (%v) out %q; reference %d %q", in, done, n, rej, out, refN, canonical)
			}
			var back Chunked
			if _, _, dn, r := back.Feed(make([]byte, len(out)+18), out); !dn || r != nil {
				t.Fatalf("%q: canonical output %q is not read back", in, out)
			}
			_ = data
		case "refused":
			if rej == nil {
				t.Fatalf("%q: reference refuses, decoder done %v at %d", in, done, n)
			}
		case "incomplete":
			if done {
				t.Fatalf("%q: reference needs more bytes, decoder done at %d out %q", in, n, out)
			}
		}
		var c Chunked
		cn, cdone, crej := c.Check(in)
		if (crej != nil) != (rej != nil) || cdone != done || (done && cn != n) {
			t.Fatalf("%q: Check %d %v %v, Feed %d %v %v", in, cn, cdone, crej, n, done, rej)
		}
	})
}

// The reference itself is checked against the tables, so a lenient oracle cannot hide a bug.
func TestReferenceReaders(t *testing.T) {
	for _, tc := range validChunked {
		if _, canonical, _, v := refChunked(tc.in); v != "ok" || canonical != tc.want {
			t.Errorf("reference on %s: %s %q", tc.name, v, canonical)
		}
	}
	for _, tc := range invalidChunked {
		if _, _, _, v := refChunked(tc.in); v != "refused" {
			t.Errorf("reference on %s: %s", tc.name, v)
		}
	}
	for _, s := range headSeeds {
		var h Head
		ok := ParseHead([]byte(s), &h) == nil
		if ok {
			_, _, _, ok = ParseRequestLine(h.Line)
		}
		if _, refOK := refReadHead(s); ok != refOK || bytes.Contains([]byte(s), []byte("Content-Length: 5\r\nTransfer")) && ok {
			t.Errorf("head %q: parser %v, reference %v", s, ok, refOK)
		}
	}
}

// refStream reads a client's byte stream as the guard must: messages one after another, each
// head screened, each body skipped by its framing (chunked bodies by refChunked). It returns
// where the last whole message ended, the verdict ("end", "pass", "incomplete" or "refused"),
// where a refused message started, and whether that message's head may have been released
// before its body was checked (Expect).
func refStream(in string, maxHead int) (last int, verdict string, refusedAt int, streamed bool) {
	const preface = "PRI * HTTP/2.0\r\n"
	pos := 0
	for {
		for pos < len(in) && (in[pos] == '\r' || in[pos] == '\n') {
			pos++
		}
		rest := in[pos:]
		switch {
		case rest == "":
			return last, "end", 0, false
		case strings.HasPrefix(rest, preface):
			return last, "pass", 0, false
		}
		end := -1
		for i := 0; i < len(rest) && end < 0; i++ {
			if rest[i] == '\n' && strings.HasPrefix(rest[i+1:], "\n") {
				end = i + 2
			} else if rest[i] == '\n' && strings.HasPrefix(rest[i+1:], "\r\n") {
				end = i + 3
			}
		}
		if end < 0 {
			if len(rest) > maxHead {
				return last, "refused", pos, false
			}
			return last, "incomplete", 0, false
		}
		m, ok := refReadHeadLine(rest[:end], false)
		if !ok || end > maxHead {
			return last, "refused", pos, false
		}
		start := pos
		pos += end
		switch {
		case m.upgrade:
			return last, "pass", 0, false
		case m.chunked:
			_, _, n, v := refChunked(in[pos:])
			if v != "ok" {
				expect := false
				for _, f := range m.fields {
					expect = expect || strings.EqualFold(f[0], "Expect")
				}
				return last, v, start, expect
			}
			pos += n
		case m.contentLength > 0:
			if int64(len(in)-pos) < m.contentLength {
				return last, "incomplete", 0, false
			}
			pos += int(m.contentLength)
		}
		last = pos
	}
}

// FuzzGuard feeds a client's byte stream, in pieces, through the guard in front of net/http:
// it must release exactly the bytes the reference accepts, hold back a chunked request until
// its body is checked, and refuse what the reference refuses.
func FuzzGuard(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s), uint8(0))
	}
	for _, s := range chunkSeeds {
		f.Add([]byte("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"+s+"GET / HTTP/1.1\r\n\r\n"), uint8(3))
	}
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\nGET /\r\n\r\nGET /b HTTP/1.1\r\nA: b\r\n c\r\n\r\n"), uint8(1))
	f.Add([]byte("\r\n\nGET /ws HTTP/1.1\r\nUpgrade: x\r\n\r\n\x00\x01"), uint8(2))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), uint8(5))
	f.Fuzz(func(t *testing.T, in []byte, piece uint8) {
		if len(in) > holdChunked {
			return // the reference does not model a body streamed past the hold limit
		}
		p := int(piece)%16 + 1
		if piece >= 240 {
			p = len(in) + 1
		}
		out, rej := feedAll(string(in), p)
		if !strings.HasPrefix(string(in), out) {
			t.Fatalf("%q: released %q, not a prefix of the input", in, out)
		}
		last, verdict, at, streamed := refStream(string(in), 1024)
		switch verdict {
		case "end", "pass":
			if rej != nil || out != string(in) {
				t.Fatalf("%q: reference accepts it all (%s); guard released %d bytes, %v", in, verdict, len(out), rej)
			}
		case "incomplete":
			if len(out) < last {
				t.Fatalf("%q: guard released %d bytes (%v), the reference %d whole", in, len(out), rej, last)
			}
		case "refused":
			if rej == nil || len(out) < at || (!streamed && len(out) != at) {
				t.Fatalf("%q: reference refuses the message at %d; guard released %d bytes, %v", in, at, len(out), rej)
			}
		}
		if rej != nil && verdict != "refused" && verdict != "incomplete" {
			t.Fatalf("%q: guard refuses (%v), the reference says %s", in, rej, verdict)
		}
	})
}
