package h1

import "bytes"

// The chunked rule (RFC 9112 section 7.1), the same for requests and responses, on every engine:
//
//	chunked-body = *chunk last-chunk trailer-section CRLF
//	chunk        = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//	chunk-size   = 1*HEXDIG                  ; at most 16 digits, value < 2^63
//	chunk-ext    = *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )
//	trailer-section = *( field-line CRLF )
//
// is read exactly: every line ends in CRLF (no bare LF, no bare CR), no whitespace around a
// chunk size except BWS before ";", no empty line before a chunk size, chunk data followed by
// CRLF, extensions and trailer fields checked against their grammar. Whatever passes is written
// out canonically: lowercase hex size without leading zeros, CRLF, the data, CRLF; the last
// chunk as "0\r\n"; chunk extensions dropped (nothing here gives them a meaning); trailer fields
// validated like header fields, then dropped (the body ends "0\r\n\r\n") or, with KeepTrailers,
// kept for the caller, which re-serialises them (Trailers) and ends the body itself. With
// Payload the output is the data alone, for a receiver that frames it itself (HTTP/2). Anything
// else is a Rejection (400): the engines answer it and close, and no byte after the error is
// forwarded.

// Limits that bound the work spent on framing that carries no data.
const (
	maxChunkLine   = 4096     // a chunk-size line with its extensions
	maxTrailer     = 16 << 10 // the whole trailer section
	maxSizeDigits  = 16
	maxPendingSize = maxSizeDigits + 2 // the longest canonical line: 16 hex digits and CRLF
)

// chunkState is where the decoder is in the chunked grammar.
type chunkState uint8

const (
	csSize         chunkState = iota // first digit of a chunk size
	csSizeDigits                     // more digits, or the end of the size
	csSizeBWS                        // whitespace after the size: only ";" may follow
	csExtBWS                         // after ";": whitespace, then an extension name
	csExtName                        // in an extension name
	csExtNameBWS                     // whitespace after a name: "=" or ";" must follow
	csExtValBWS                      // after "=": whitespace, then the value
	csExtToken                       // in a token value
	csExtQuoted                      // in a quoted-string value
	csExtQuotedEsc                   // after a backslash in a quoted string
	csExtAfterVal                    // right after a quoted-string value
	csExtAfterBWS                    // whitespace after a value: ";" must follow
	csSizeLF                         // after the CR that ends a size line
	csData                           // in chunk data
	csDataCR                         // the CR after chunk data
	csDataLF                         // the LF after chunk data
	csTrailer                        // the start of a trailer line (or of the final CRLF)
	csTrailerName                    // in a trailer field name
	csTrailerValue                   // in a trailer field value
	csTrailerLF                      // after the CR that ends a trailer line
	csEndLF                          // after the CR of the final CRLF
	csDone                           // the body ended; pending output may remain
	csFailed
)

// Chunked decodes one chunked body at a time, incrementally: input comes in pieces of any size,
// canonical framing (see the rule above) goes to the caller's buffer, and nothing is allocated.
// The zero value is ready for a body; after a body ends it is ready for the next one. A
// refusal is sticky.
type Chunked struct {
	// Payload: the output is the chunk data alone, without framing.
	Payload bool
	// KeepTrailers: the trailer section is kept (Trailers) and the body's final CRLF is not
	// written: the caller writes the trailer fields it forwards and then the CRLF.
	KeepTrailers bool

	trailer   []byte // the trailer section's field lines as received (KeepTrailers)
	started   bool   // a body is under way (its trailer section replaces the last one's)
	st        chunkState
	digits    uint8
	size      int64 // the chunk size being read, then the data left in the chunk
	line      int   // bytes of the current size line, or of the trailer section
	pend      [maxPendingSize]byte
	pendFrom  uint8
	pendTo    uint8
	rejection *Rejection
}

// Feed decodes src and writes the canonical framing of the bytes it consumed to dst. It stops
// when src is used up, dst is full, or the body ends (done: src[nSrc:] belongs to what follows
// the body). Output is never more than 18 bytes ahead of input, so a dst of len(src)+18 always
// takes all of src. rej is the refusal of malformed framing: src[:nSrc] holds the offending
// byte and dst[:nDst] must not be forwarded as a whole body.
func (d *Chunked) Feed(dst, src []byte) (nDst, nSrc int, done bool, rej *Rejection) {
	return d.run(dst, src, false)
}

// Check runs the same state machine without producing output: it reports how much of src
// belongs to the body, whether the body ended there, and the refusal of malformed framing.
// The guard uses it to screen bodies that Go's server decodes itself.
func (d *Chunked) Check(src []byte) (nSrc int, done bool, rej *Rejection) {
	_, nSrc, done, rej = d.run(nil, src, true)
	return nSrc, done, rej
}

// Append is Feed appending to dst (grown as needed): it consumes all of src unless the body
// ends or is refused first.
func (d *Chunked) Append(dst, src []byte) (out []byte, nSrc int, done bool, rej *Rejection) {
	for {
		if need := len(dst) + len(src) - nSrc + maxPendingSize; cap(dst) < need {
			nb := make([]byte, len(dst), max(need, 2*cap(dst)))
			copy(nb, dst)
			dst = nb
		}
		nd, ns, dn, r := d.Feed(dst[len(dst):cap(dst)], src[nSrc:])
		dst, nSrc = dst[:len(dst)+nd], nSrc+ns
		if dn || r != nil || nSrc == len(src) && d.pendFrom == d.pendTo {
			return dst, nSrc, dn, r
		}
	}
}

func (d *Chunked) run(dst, src []byte, discard bool) (nDst, nSrc int, done bool, rej *Rejection) {
	if d.rejection != nil {
		return 0, 0, false, d.rejection
	}
	for {
		if d.pendFrom < d.pendTo {
			if discard {
				d.pendFrom = d.pendTo
			} else {
				k := copy(dst[nDst:], d.pend[d.pendFrom:d.pendTo])
				nDst += k
				d.pendFrom += uint8(k)
				if d.pendFrom < d.pendTo {
					return nDst, nSrc, false, nil
				}
			}
		}
		if d.st == csDone {
			*d = Chunked{Payload: d.Payload, KeepTrailers: d.KeepTrailers, trailer: d.trailer}
			return nDst, nSrc, true, nil
		}
		if nSrc == len(src) {
			return nDst, nSrc, false, nil
		}
		if d.st == csData {
			k := int(min(int64(len(src)-nSrc), d.size))
			if !discard {
				k = min(k, len(dst)-nDst)
				if k == 0 {
					return nDst, nSrc, false, nil
				}
				copy(dst[nDst:], src[nSrc:nSrc+k])
				nDst += k
			}
			nSrc += k
			if d.size -= int64(k); d.size == 0 {
				d.st = csDataCR
			}
			continue
		}
		ch := src[nSrc]
		nSrc++
		if r := d.step(ch); r != nil {
			d.st, d.rejection = csFailed, r
			return nDst, nSrc, false, r
		}
	}
}

// Refusals of malformed chunked framing.
var (
	errChunkSize     = &Rejection{400, "invalid chunk size line (RFC 9112 7.1)"}
	errChunkOverflow = &Rejection{400, "chunk size too large"}
	errChunkExt      = &Rejection{400, "invalid chunk extension (RFC 9112 7.1.1)"}
	errChunkLine     = &Rejection{400, "chunk size line too long"}
	errChunkCRLF     = &Rejection{400, "chunk data not followed by CRLF"}
	errTrailer       = &Rejection{400, "invalid trailer field (RFC 9112 7.1.2)"}
	errTrailerSize   = &Rejection{400, "trailer section too large"}
)

// step advances the grammar by one framing byte.
func (d *Chunked) step(ch byte) *Rejection {
	if !d.started {
		d.started, d.trailer = true, d.trailer[:0]
	}
	if d.st <= csSizeLF {
		if d.line++; d.line > maxChunkLine {
			return errChunkLine
		}
	} else if d.st >= csTrailer && d.st <= csEndLF {
		if d.line++; d.line > maxTrailer {
			return errTrailerSize
		}
	}
	switch d.st {
	case csSize, csSizeDigits:
		return d.sizeByte(ch)
	case csSizeBWS, csExtBWS, csExtName, csExtNameBWS, csExtValBWS, csExtToken, csExtQuoted, csExtQuotedEsc, csExtAfterVal, csExtAfterBWS:
		return d.extByte(ch)
	case csSizeLF:
		if ch != '\n' {
			return errChunkSize
		}
		d.emitSize()
		d.line, d.digits = 0, 0
		if d.size == 0 {
			d.st = csTrailer
		} else {
			d.st = csData
		}
	case csDataCR:
		if ch != '\r' {
			return errChunkCRLF
		}
		d.st = csDataLF
	case csDataLF:
		if ch != '\n' {
			return errChunkCRLF
		}
		d.emit("\r\n")
		d.st = csSize
	default:
		return d.trailerByte(ch)
	}
	return nil
}

// sizeByte reads the chunk-size digits and what ends them.
func (d *Chunked) sizeByte(ch byte) *Rejection {
	if v, ok := hexValue(ch); ok {
		if d.digits == maxSizeDigits || d.size > (1<<63-1)>>4 {
			return errChunkOverflow
		}
		d.size = d.size<<4 | int64(v)
		d.digits++
		d.st = csSizeDigits
		return nil
	}
	if d.st == csSize {
		return errChunkSize // no digit: an empty line, whitespace, a sign, ...
	}
	switch ch {
	case '\r':
		d.st = csSizeLF
	case ';':
		d.st = csExtBWS
	case ' ', '\t':
		d.st = csSizeBWS
	default:
		return errChunkSize
	}
	return nil
}

// extByte reads the chunk extensions, which are checked against the grammar and dropped.
func (d *Chunked) extByte(ch byte) *Rejection {
	ws := ch == ' ' || ch == '\t'
	next, ok := d.st, false
	switch d.st {
	case csSizeBWS, csExtAfterBWS:
		next, ok = whichever(ws, d.st, ch == ';', csExtBWS)
	case csExtBWS:
		next, ok = whichever(ws, d.st, IsTokenChar(ch), csExtName)
	case csExtName:
		switch {
		case IsTokenChar(ch):
			ok = true
		case ch == '=':
			next, ok = csExtValBWS, true
		default:
			next, ok = d.afterValue(ch, ws)
		}
	case csExtNameBWS:
		switch {
		case ws:
			ok = true
		case ch == '=':
			next, ok = csExtValBWS, true
		case ch == ';':
			next, ok = csExtBWS, true
		}
	case csExtValBWS:
		switch {
		case ws:
			ok = true
		case IsTokenChar(ch):
			next, ok = csExtToken, true
		case ch == '"':
			next, ok = csExtQuoted, true
		}
	case csExtToken:
		if IsTokenChar(ch) {
			ok = true
		} else {
			next, ok = d.afterValue(ch, ws)
		}
	case csExtAfterVal:
		next, ok = d.afterValue(ch, ws)
	case csExtQuoted:
		switch {
		case ch == '"':
			next, ok = csExtAfterVal, true
		case ch == '\\':
			next, ok = csExtQuotedEsc, true
		default:
			ok = ch == '\t' || (ch >= ' ' && ch != 0x7f)
		}
	case csExtQuotedEsc:
		next, ok = csExtQuoted, ch == '\t' || (ch >= ' ' && ch != 0x7f)
	}
	if !ok {
		return errChunkExt
	}
	d.st = next
	return nil
}

// whichever is the state after a byte that is whitespace (stay) or the one thing allowed (to).
func whichever(ws bool, stay chunkState, allowed bool, to chunkState) (chunkState, bool) {
	switch {
	case ws:
		return stay, true
	case allowed:
		return to, true
	}
	return stay, false
}

// afterValue is what may follow an extension name or value: whitespace, ";" or the line's CR.
func (d *Chunked) afterValue(ch byte, ws bool) (chunkState, bool) {
	switch {
	case ws:
		if d.st == csExtName {
			return csExtNameBWS, true
		}
		return csExtAfterBWS, true
	case ch == ';':
		return csExtBWS, true
	case ch == '\r':
		return csSizeLF, true
	}
	return d.st, false
}

// trailerByte reads the trailer section: field lines checked like header fields, then kept
// (KeepTrailers) or dropped.
func (d *Chunked) trailerByte(ch byte) *Rejection {
	if d.KeepTrailers && d.st != csEndLF && (d.st != csTrailer || ch != '\r') {
		d.trailer = append(d.trailer, ch)
	}
	switch d.st {
	case csTrailer:
		switch {
		case ch == '\r':
			d.st = csEndLF
		case IsTokenChar(ch):
			d.st = csTrailerName
		default:
			return errTrailer // obs-fold, a missing name, a bare LF, ...
		}
	case csTrailerName:
		switch {
		case ch == ':':
			d.st = csTrailerValue
		case !IsTokenChar(ch):
			return errTrailer
		}
	case csTrailerValue:
		switch {
		case ch == '\r':
			d.st = csTrailerLF
		case (ch < ' ' && ch != '\t') || ch == 0x7f:
			return errTrailer
		}
	case csTrailerLF:
		if ch != '\n' {
			return errTrailer
		}
		d.st = csTrailer
	case csEndLF:
		if ch != '\n' {
			return errTrailer
		}
		if !d.KeepTrailers {
			d.emit("\r\n")
		}
		d.st = csDone
	default:
		return errChunkSize
	}
	return nil
}

// emitSize queues the canonical size line: lowercase hex without leading zeros, CRLF.
func (d *Chunked) emitSize() {
	if d.Payload {
		return
	}
	const hex = "0123456789abcdef"
	var tmp [maxSizeDigits]byte
	i := len(tmp)
	for v := d.size; ; v >>= 4 {
		i--
		tmp[i] = hex[v&15]
		if v < 16 {
			break
		}
	}
	n := copy(d.pend[:], tmp[i:])
	n += copy(d.pend[n:], "\r\n")
	d.pendFrom, d.pendTo = 0, uint8(n)
}

// emit queues fixed framing bytes (the pending buffer is empty whenever a byte is stepped).
func (d *Chunked) emit(s string) {
	if d.Payload {
		return
	}
	d.pendFrom, d.pendTo = 0, uint8(copy(d.pend[:], s))
}

// hexValue is the value of a hex digit.
func hexValue(ch byte) (byte, bool) {
	switch {
	case ch >= '0' && ch <= '9':
		return ch - '0', true
	case ch >= 'a' && ch <= 'f':
		return ch - 'a' + 10, true
	case ch >= 'A' && ch <= 'F':
		return ch - 'A' + 10, true
	}
	return 0, false
}

// Trailers appends to dst the trailer fields of the body that just ended (KeepTrailers) that
// may be forwarded, in order; their slices point into the decoder's buffer and stay valid until
// the next body starts. Fields that must not travel in a trailer (framing, routing,
// authentication and the other controls RFC 9110 6.5.1 names) are left out: a recipient may
// discard any trailer field, and these would change how the message is read.
func (d *Chunked) Trailers(dst []Field) []Field {
	for rest := d.trailer; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break
		}
		line := rest[:i-1] // the grammar put CRLF there
		rest = rest[i+1:]
		colon := bytes.IndexByte(line, ':')
		name, value := line[:colon], bytes.Trim(line[colon+1:], " \t")
		if TrailerAllowed(name) {
			dst = append(dst, Field{Name: name, Value: value})
		}
	}
	return dst
}

// forbiddenTrailers are the fields never forwarded as trailers (the list Go's HTTP/2 and most
// proxies use: RFC 9110 6.5.1's framing, routing, request modifiers, authentication and
// response controls).
var forbiddenTrailers = []string{"cache-control", "connection", "content-encoding", "content-length",
	"content-range", "content-type", "expect", "host", "keep-alive", "max-forwards", "pragma",
	"proxy-authenticate", "proxy-authorization", "proxy-connection", "range", "realm", "te", "trailer",
	"transfer-encoding", "www-authenticate", "authorization", "set-cookie", "cookie"}

// TrailerAllowed reports whether a trailer field named name may be forwarded (not one of
// forbiddenTrailers); every protocol's trailers are screened by it.
func TrailerAllowed(name []byte) bool {
	for _, f := range forbiddenTrailers {
		if bytes.EqualFold(name, []byte(f)) {
			return false
		}
	}
	return true
}
