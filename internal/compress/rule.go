package compress

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Rule is a stop's `compress:` block: which codings, for which media types, from what size.
type Rule struct {
	// Encodings in the proxy's order of preference for clients that rank several alike
	// (default zstd, br, gzip).
	Encodings []string `yaml:"encodings"`
	// Types are the media types compressed: exact ("application/json") or a top-level type
	// ("text/*"). Default: text/*, JSON, JavaScript, XML, SVG, wasm and the like.
	Types []string `yaml:"types"`
	// MinSize: a response with a Content-Length below it is sent as it is (default 256 bytes:
	// smaller ones barely shrink).
	MinSize int64 `yaml:"min_size"`
	// Levels per coding (gzip 1-9, br 0-11, zstd 1-4).
	Levels Levels `yaml:"levels"`
}

// DefaultTypes are the media types compressed when a Rule names none.
var DefaultTypes = []string{"text/*", "application/json", "application/javascript",
	"application/xml", "application/xhtml+xml", "application/rss+xml", "application/atom+xml",
	"application/ld+json", "application/manifest+json", "application/wasm", "image/svg+xml",
	"application/x-javascript", "application/grpc-web-text"}

// alreadyEncoded are media types whose bodies are compressed formats: compressing them again
// only costs CPU (a Types list naming one is refused).
var alreadyEncoded = []string{"image/*", "video/*", "audio/*", "font/woff", "font/woff2",
	"application/gzip", "application/x-gzip", "application/zip", "application/zstd",
	"application/x-bzip2", "application/x-xz", "application/x-7z-compressed", "application/x-rar-compressed",
	"application/octet-stream"}

// Check returns the sub-field of the rule at fault (e.g. "types[2]", "" for the rule itself)
// and what is wrong with it, naming the fix; nil when the rule is good.
func (r *Rule) Check() (field string, err error) {
	for i, name := range r.Encodings {
		if cd, ok := Parse(name); !ok || cd == Identity {
			return "encodings[" + strconv.Itoa(i) + "]", fmt.Errorf("unknown encoding %q; use zstd, br or gzip", name)
		}
	}
	for i, t := range r.Types {
		fi := "types[" + strconv.Itoa(i) + "]"
		if !strings.Contains(t, "/") || strings.HasPrefix(t, "*") {
			return fi, fmt.Errorf("%q is not a media type; write type/subtype or type/*", t)
		}
		probe := t
		if wild, ok := strings.CutSuffix(t, "/*"); ok {
			probe = wild + "/x" // a whole top-level type: refused when that type is encoded
		}
		if !strings.EqualFold(t, "image/svg+xml") && Compressible([]byte(probe), alreadyEncoded) {
			return fi, fmt.Errorf("%q is an already compressed type: compressing it again only costs CPU; remove it", t)
		}
	}
	if r.MinSize < 0 {
		return "min_size", fmt.Errorf("is negative; use 0 to compress every size")
	}
	if err := r.Levels.Check(); err != nil {
		return "levels", err
	}
	return "", nil
}

// Policy is a Rule at run time: what to negotiate, what applies, and its encoders.
type Policy struct {
	Offered []Coding
	types   []string
	minSize int64
	Enc     *Encoders
}

// NewPolicy builds the policy of a checked rule (nil: no compression, a nil Policy).
func NewPolicy(r *Rule) *Policy {
	if r == nil {
		return nil
	}
	p := &Policy{types: r.Types, minSize: r.MinSize, Enc: NewEncoders(r.Levels)}
	if p.types == nil {
		p.types = DefaultTypes
	}
	if r.MinSize == 0 {
		p.minSize = 256
	}
	for _, name := range r.Encodings {
		cd, _ := Parse(name) // checked
		p.Offered = append(p.Offered, cd)
	}
	if p.Offered == nil {
		p.Offered = []Coding{Zstd, Brotli, Gzip}
	}
	return p
}

// Negotiate is the coding an Accept-Encoding value asks for among the policy's (Identity for
// a nil policy).
func (p *Policy) Negotiate(accept []byte) Coding {
	if p == nil {
		return Identity
	}
	return Negotiate(accept, p.Offered)
}

// Response is what decides whether a response is compressed.
type Response struct {
	Status        int
	ContentLength int64 // -1: unknown
	ContentType   []byte
	Encoding      []byte // Content-Encoding
	CacheControl  []byte
	ContentRange  bool
}

// ResponseOf reads a response header for Applies.
func ResponseOf(status int, contentLength int64, h http.Header) Response {
	return Response{Status: status, ContentLength: contentLength,
		ContentType: []byte(h.Get("Content-Type")), Encoding: []byte(h.Get("Content-Encoding")),
		CacheControl: []byte(strings.Join(h.Values("Cache-Control"), ",")), ContentRange: h.Get("Content-Range") != ""}
}

// Applies reports whether a response is compressed: a body of a compressible type the origin
// left unencoded, not a partial one (206 or Content-Range), not marked no-transform (RFC 9111
// 5.2.2.6), and not known to be under the minimum size.
func (p *Policy) Applies(r Response) bool {
	switch {
	case p == nil:
		return false
	case r.Status < 200, r.Status == http.StatusNoContent, r.Status == http.StatusPartialContent,
		r.Status == http.StatusNotModified, r.ContentRange:
		return false
	case len(r.Encoding) > 0 && !bytes.EqualFold(bytes.TrimSpace(r.Encoding), []byte("identity")):
		return false
	case r.ContentLength >= 0 && r.ContentLength < p.minSize:
		return false
	case bytes.Contains(bytes.ToLower(r.CacheControl), []byte("no-transform")):
		return false
	}
	return Compressible(r.ContentType, p.types)
}

// VaryHasAcceptEncoding reports whether a Vary value already covers Accept-Encoding.
func VaryHasAcceptEncoding(v []byte) bool {
	return bytes.Contains(bytes.ToLower(v), []byte("accept-encoding")) || bytes.Equal(bytes.TrimSpace(v), []byte("*"))
}

// EncodeHeader rewrites a response header for a body compressed with cd: Content-Length goes
// (the length is the origin's, not ours), Content-Encoding names the coding, Vary gains
// Accept-Encoding (caches must key on it), and a strong ETag becomes weak (the bytes differ
// from the origin's representation; RFC 9110 8.8.3).
func EncodeHeader(h http.Header, cd Coding) {
	h.Del("Content-Length")
	h.Set("Content-Encoding", cd.String())
	AddVary(h)
	if et := h.Get("Etag"); et != "" && !strings.HasPrefix(et, "W/") {
		h.Set("Etag", "W/"+et)
	}
}

// AddVary adds Accept-Encoding to a header's Vary unless it is there (or Vary is *).
func AddVary(h http.Header) {
	for _, v := range h.Values("Vary") {
		if VaryHasAcceptEncoding([]byte(v)) {
			return
		}
	}
	h.Add("Vary", "Accept-Encoding")
}

// Body is a response body compressed as it is read, the encoder's end after the source's; with
// flush, what each read from the source gave goes out at once (a stream is not held back).
// Close gives the encoder back.
type Body struct {
	src   io.ReadCloser
	p     *Policy
	cd    Coding
	enc   Writer
	out   bytes.Buffer
	buf   []byte
	flush bool
	done  bool
}

// NewBody compresses src with cd; flush for a body of unknown length (a stream).
func (p *Policy) NewBody(src io.ReadCloser, cd Coding, flush bool) *Body {
	b := &Body{src: src, p: p, cd: cd, buf: make([]byte, 16<<10), flush: flush}
	b.enc = p.Enc.Get(cd, &b.out)
	return b
}

func (b *Body) Read(dst []byte) (int, error) {
	for b.out.Len() == 0 {
		if b.done {
			return 0, io.EOF
		}
		n, err := b.src.Read(b.buf)
		if n > 0 {
			b.enc.Write(b.buf[:n]) // into b.out: cannot fail
		}
		switch {
		case err == io.EOF:
			b.enc.Close()
			b.release()
			b.done = true
		case err != nil:
			return 0, err
		case n > 0 && b.flush:
			b.enc.Flush()
		}
	}
	return b.out.Read(dst)
}

// Close closes the source and gives the encoder back.
func (b *Body) Close() error {
	b.release()
	return b.src.Close()
}

func (b *Body) release() {
	if b.enc != nil {
		b.p.Enc.Put(b.cd, b.enc)
		b.enc = nil
	}
}
