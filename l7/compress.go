package l7

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/switchyard/switchyard/internal/compress"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/l7/core"
)

// A route's response compression (`compress:`, a compress.Rule): the coding the client ranks
// highest among the route's (Accept-Encoding, negotiated when the request is routed), applied
// to responses the rule covers (compress.Policy.Applies), streamed: each read from the backend
// goes out compressed and flushed, never held for the whole body. The core's engines encode in
// goConn.encodeBody, net/http's path with compress.Body; one decision for both.

// validateCompress checks a route's compress block at field f.
func (c *Config) validateCompress(f string, r *compress.Rule) error {
	if sub, err := r.Check(); err != nil {
		if sub != "" {
			f += "." + sub
		}
		return c.fieldError(f, "%v", err)
	}
	return nil
}

// negotiateCoding is the coding the request's Accept-Encoding asks for under policy p.
func negotiateCoding(p *compress.Policy, h *h1.Head) compress.Coding {
	if p == nil {
		return compress.Identity
	}
	for _, f := range h.Fields {
		if bytes.EqualFold(f.Name, []byte("Accept-Encoding")) {
			return p.Negotiate(f.Value)
		}
	}
	return compress.Identity
}

// responseOf reads a response head's fields for compress.Policy.Applies.
func responseOf(code int, h *h1.Head) compress.Response {
	r := compress.Response{Status: code, ContentLength: h.ContentLength}
	for _, f := range h.Fields {
		switch {
		case bytes.EqualFold(f.Name, []byte("Content-Type")):
			r.ContentType = f.Value
		case bytes.EqualFold(f.Name, []byte("Content-Encoding")):
			r.Encoding = f.Value
		case bytes.EqualFold(f.Name, []byte("Cache-Control")):
			r.CacheControl = append(append(r.CacheControl, ','), f.Value...)
		case bytes.EqualFold(f.Name, []byte("Content-Range")):
			r.ContentRange = true
		}
	}
	return r
}

var (
	hContentEncoding = []byte("Content-Encoding")
	hVary            = []byte("Vary")
	acceptEncoding   = []byte("Accept-Encoding")
)

// encodedHead is compress.EncodeHeader on the core's parsed head: Content-Length goes,
// Content-Encoding names the coding, Vary gains Accept-Encoding once, a strong ETag turns weak.
func encodedHead(h *h1.Head, cd compress.Coding) {
	fields := h.Fields[:0]
	vary := false
	for _, f := range h.Fields {
		switch {
		case bytes.EqualFold(f.Name, []byte("Content-Length")):
			continue
		case bytes.EqualFold(f.Name, hVary):
			vary = vary || compress.VaryHasAcceptEncoding(f.Value)
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
	if gc.coding == compress.Identity || fr == core.NoBody || !gc.compress.Applies(responseOf(code, &gc.rhead)) {
		return fr, decode
	}
	gc.encFlush = gc.rhead.ContentLength < 0 // a stream: what came goes out now; a sized body as the encoder fills
	encodedHead(&gc.rhead, gc.coding)
	gc.encOut.Reset()
	gc.enc = gc.compress.Enc.Get(gc.coding, &gc.encOut)
	return core.CloseBody, true
}

// encodeBody returns what goes to the client for body data: the data itself, or with an
// encoder, the data compressed (flushed at once for a body of unknown length, which may be a
// stream a client reads as it comes; a sized body goes out as the encoder fills, which costs
// less than a flush per read) and once the body is done, the encoder's end, on HTTP/1.1 as
// chunks ending with the last chunk and the body's trailers.
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
	case len(data) > 0 && gc.encFlush:
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
		gc.compress.Enc.Put(gc.coding, gc.enc)
		gc.enc = nil
	}
}

// encodeResponse compresses resp in the coding its request asked for, when the route's rule
// applies (net/http's path: ModifyResponse).
func encodeResponse(p *compress.Policy, resp *http.Response) {
	if p == nil || resp.Request.Method == http.MethodHead {
		return
	}
	cd := p.Negotiate([]byte(strings.Join(resp.Request.Header.Values("Accept-Encoding"), ",")))
	if cd == compress.Identity || !p.Applies(compress.ResponseOf(resp.StatusCode, resp.ContentLength, resp.Header)) {
		return
	}
	compress.EncodeHeader(resp.Header, cd)
	resp.Body, resp.ContentLength = p.NewBody(resp.Body, cd, resp.ContentLength < 0), -1
}
