package l7

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/internal/compress"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/l7/core"
)

// A route's response compression: the coding the client ranks highest among the route's
// (Accept-Encoding, negotiated when the request is routed), applied to responses whose type is
// compressible and that the backend did not encode, streamed (each read from the backend goes
// out compressed and flushed, never held for the whole body). The core's engines encode in
// goConn.encodeBody, net/http's path in encodingBody; one decision (compressRT.applies) for both.

// Compress is a route's `compress:` block.
type Compress struct {
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
	Levels compress.Levels `yaml:"levels"`
}

var defaultCompressTypes = []string{"text/*", "application/json", "application/javascript",
	"application/xml", "application/xhtml+xml", "application/rss+xml", "application/atom+xml",
	"application/ld+json", "application/manifest+json", "application/wasm", "image/svg+xml",
	"application/x-javascript", "application/grpc-web-text"}

// alreadyEncoded are media types whose bodies are compressed formats: compressing them again
// only costs CPU (a `types` list naming one is refused).
var alreadyEncoded = []string{"image/*", "video/*", "audio/*", "font/woff", "font/woff2",
	"application/gzip", "application/x-gzip", "application/zip", "application/zstd",
	"application/x-bzip2", "application/x-xz", "application/x-7z-compressed", "application/x-rar-compressed",
	"application/octet-stream"}

// validate checks a route's compress block at field f, naming the fix.
func (cp *Compress) validate(c *Config, f string) error {
	for i, name := range cp.Encodings {
		if cd, ok := compress.Parse(name); !ok || cd == compress.Identity {
			return c.fieldError(f+".encodings["+strconv.Itoa(i)+"]", "unknown encoding %q; use zstd, br or gzip", name)
		}
	}
	for i, t := range cp.Types {
		fi := f + ".types[" + strconv.Itoa(i) + "]"
		if !strings.Contains(t, "/") || strings.HasPrefix(t, "*") {
			return c.fieldError(fi, "%q is not a media type; write type/subtype or type/*", t)
		}
		if t != "image/svg+xml" && compress.Compressible([]byte(t), alreadyEncoded) || strings.HasSuffix(t, "/*") && compress.Compressible([]byte(strings.TrimSuffix(t, "*")+"x"), alreadyEncoded) {
			return c.fieldError(fi, "%q is an already compressed type: compressing it again only costs CPU; remove it", t)
		}
	}
	if cp.MinSize < 0 {
		return c.fieldError(f+".min_size", "is negative; use 0 to compress every size")
	}
	if err := cp.Levels.Check(); err != nil {
		return c.fieldError(f+".levels", "%v", err)
	}
	return nil
}

// compressRT is a route's compression at run time.
type compressRT struct {
	offered []compress.Coding
	types   []string
	minSize int64
	enc     *compress.Encoders
}

func newCompressRT(cp *Compress) *compressRT {
	if cp == nil {
		return nil
	}
	rt := &compressRT{types: cp.Types, minSize: cp.MinSize, enc: compress.NewEncoders(cp.Levels)}
	if rt.types == nil {
		rt.types = defaultCompressTypes
	}
	if cp.MinSize == 0 {
		rt.minSize = 256
	}
	for _, name := range cp.Encodings {
		cd, _ := compress.Parse(name) // validated
		rt.offered = append(rt.offered, cd)
	}
	if rt.offered == nil {
		rt.offered = []compress.Coding{compress.Zstd, compress.Brotli, compress.Gzip}
	}
	return rt
}

// negotiate is the coding the request's Accept-Encoding asks for (Identity: none, or no
// compression on the route).
func (rt *compressRT) negotiate(h *h1.Head) compress.Coding {
	if rt == nil {
		return compress.Identity
	}
	for _, f := range h.Fields {
		if bytes.EqualFold(f.Name, []byte("Accept-Encoding")) {
			return compress.Negotiate(f.Value, rt.offered)
		}
	}
	return compress.Identity
}

// responseInfo is what decides whether a response is compressed.
type responseInfo struct {
	code                                int
	contentLength                       int64 // -1: unknown
	contentType, encoding, cacheControl []byte
	contentRange                        bool
}

// applies reports whether the response is compressed: a body of a compressible type the
// backend left unencoded, not a partial one (206 or Content-Range), not marked no-transform
// (RFC 9111 5.2.2.6), and not known to be under the route's minimum size.
func (rt *compressRT) applies(ri responseInfo) bool {
	switch {
	case ri.code < 200, ri.code == http.StatusNoContent, ri.code == http.StatusPartialContent,
		ri.code == http.StatusNotModified, ri.contentRange:
		return false
	case len(ri.encoding) > 0 && !bytes.EqualFold(bytes.TrimSpace(ri.encoding), []byte("identity")):
		return false
	case ri.contentLength >= 0 && ri.contentLength < rt.minSize:
		return false
	case bytes.Contains(bytes.ToLower(ri.cacheControl), []byte("no-transform")):
		return false
	}
	return compress.Compressible(ri.contentType, rt.types)
}

// infoOf reads a response head's fields for applies.
func infoOf(code int, h *h1.Head) responseInfo {
	ri := responseInfo{code: code, contentLength: h.ContentLength}
	for _, f := range h.Fields {
		switch {
		case bytes.EqualFold(f.Name, []byte("Content-Type")):
			ri.contentType = f.Value
		case bytes.EqualFold(f.Name, []byte("Content-Encoding")):
			ri.encoding = f.Value
		case bytes.EqualFold(f.Name, []byte("Cache-Control")):
			ri.cacheControl = append(append(ri.cacheControl, ','), f.Value...)
		case bytes.EqualFold(f.Name, []byte("Content-Range")):
			ri.contentRange = true
		}
	}
	return ri
}

var (
	hContentEncoding = []byte("Content-Encoding")
	hVary            = []byte("Vary")
	acceptEncoding   = []byte("Accept-Encoding")
)

// encodedHead rewrites a response head for a body compressed with cd: Content-Length goes
// (the length is the backend's, not ours), Content-Encoding names the coding, Vary gains
// Accept-Encoding (caches must key on it), and a strong ETag becomes weak (the bytes differ
// from the backend's representation; RFC 9110 8.8.3).
func encodedHead(h *h1.Head, cd compress.Coding) {
	fields := h.Fields[:0]
	vary := false
	for _, f := range h.Fields {
		switch {
		case bytes.EqualFold(f.Name, []byte("Content-Length")):
			continue
		case bytes.EqualFold(f.Name, hVary):
			vary = vary || bytes.Contains(bytes.ToLower(f.Value), []byte("accept-encoding")) || bytes.Equal(bytes.TrimSpace(f.Value), []byte("*"))
		case bytes.EqualFold(f.Name, []byte("ETag")) && !bytes.HasPrefix(f.Value, []byte("W/")):
			f.Value = append([]byte("W/"), f.Value...)
		}
		fields = append(fields, f)
	}
	fields = append(fields, h1.Field{Name: hContentEncoding, Value: []byte(cd.String())})
	if !vary {
		fields = append(fields, h1.Field{Name: hVary, Value: acceptEncoding})
	}
	h.Fields, h.ContentLength = fields, -1
}

// startEncoding decides whether the response in gc.rhead is compressed for this request (its
// coding was negotiated when routed) and, if it is, rewrites the head and takes an encoder. It
// returns the framing the client's head announces (a compressed body's length is unknown:
// chunked on HTTP/1.1) and whether the backend's body is decoded to its data (the encoder's
// input) rather than re-framed for an HTTP/1.1 client.
func (gc *goConn) startEncoding(code int, fr core.Framing) (core.Framing, bool) {
	decode := gc.stream != nil
	if gc.coding == compress.Identity || fr == core.NoBody || !gc.compress.applies(infoOf(code, &gc.rhead)) {
		return fr, decode
	}
	encodedHead(&gc.rhead, gc.coding)
	gc.encOut.Reset()
	gc.enc = gc.compress.enc.Get(gc.coding, &gc.encOut)
	return core.CloseBody, true
}

// encodeBody returns what goes to the client for body data: the data itself, or with an
// encoder, the data compressed and flushed (and once the body is done, the encoder's end, on
// HTTP/1.1 as chunks ending with the last chunk and the body's trailers).
func (gc *goConn) encodeBody(data []byte) []byte {
	if gc.enc == nil {
		return data
	}
	gc.encOut.Reset()
	done := gc.body.Done()
	if len(data) > 0 {
		gc.enc.Write(data) // into encOut: cannot fail
	}
	switch {
	case done:
		gc.enc.Close()
		gc.stopEncoding()
	case len(data) > 0:
		gc.enc.Flush()
	}
	out := gc.encOut.Bytes()
	if gc.stream != nil {
		return out
	}
	gc.encFrame = gc.encFrame[:0]
	if len(out) > 0 {
		gc.encFrame = core.AppendChunk(gc.encFrame, out)
	}
	if done {
		gc.encFrame = core.AppendLastChunk(gc.encFrame, gc.body.Trailers())
	}
	return gc.encFrame
}

// stopEncoding gives the encoder back (the response ended, whole or not).
func (gc *goConn) stopEncoding() {
	if gc.enc != nil {
		gc.compress.enc.Put(gc.coding, gc.enc)
		gc.enc = nil
	}
}

// encodingBody is a backend's response body compressed as it is read, for net/http's path
// (ReverseProxy reads it and flushes what it gets at once when the length is unknown).
type encodingBody struct {
	src  io.ReadCloser
	rt   *compressRT
	cd   compress.Coding
	enc  compress.Writer
	out  bytes.Buffer
	buf  []byte
	done bool
}

// encodeResponse compresses resp in the coding its request asked for, when the route's rule
// applies (net/http's path: ModifyResponse).
func (rt *compressRT) encodeResponse(resp *http.Response) {
	if rt == nil || resp.Request.Method == http.MethodHead {
		return
	}
	cd := compress.Negotiate([]byte(strings.Join(resp.Request.Header.Values("Accept-Encoding"), ",")), rt.offered)
	if cd == compress.Identity {
		return
	}
	h := resp.Header
	ri := responseInfo{code: resp.StatusCode, contentLength: resp.ContentLength,
		contentType: []byte(h.Get("Content-Type")), encoding: []byte(h.Get("Content-Encoding")),
		cacheControl: []byte(strings.Join(h.Values("Cache-Control"), ",")), contentRange: h.Get("Content-Range") != ""}
	if !rt.applies(ri) {
		return
	}
	var head h1.Head
	for name, vv := range h {
		for _, v := range vv {
			head.Fields = append(head.Fields, h1.Field{Name: []byte(name), Value: []byte(v)})
		}
	}
	encodedHead(&head, cd)
	clear(h)
	for _, f := range head.Fields {
		h.Add(string(f.Name), string(f.Value))
	}
	eb := &encodingBody{src: resp.Body, rt: rt, cd: cd, buf: make([]byte, 16<<10)}
	eb.enc = rt.enc.Get(cd, &eb.out)
	resp.Body, resp.ContentLength = eb, -1
	resp.Header.Del("Content-Length")
}

func (eb *encodingBody) Read(p []byte) (int, error) {
	for eb.out.Len() == 0 {
		if eb.done {
			return 0, io.EOF
		}
		n, err := eb.src.Read(eb.buf)
		if n > 0 {
			eb.enc.Write(eb.buf[:n])
		}
		switch {
		case err == io.EOF:
			eb.enc.Close()
			eb.rt.enc.Put(eb.cd, eb.enc)
			eb.enc, eb.done = nil, true
		case err != nil:
			return 0, err
		case n > 0:
			eb.enc.Flush()
		}
	}
	return eb.out.Read(p)
}

func (eb *encodingBody) Close() error {
	if eb.enc != nil {
		eb.rt.enc.Put(eb.cd, eb.enc)
		eb.enc = nil
	}
	return eb.src.Close()
}
