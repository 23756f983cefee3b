package core

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/switchyard/switchyard/internal/h1"
)

// Framing is how a response body is delimited.
type Framing int

// The response framings.
const (
	NoBody      Framing = iota // HEAD, 204, 304 (1xx heads have none either)
	LengthBody                 // Content-Length
	ChunkedBody                // chunked, re-framed canonically (h1.Chunked)
	CloseBody                  // ends when the upstream closes; sent to the client chunked
)

// ResponseFraming decides the framing of a final response to method with the given head.
func ResponseFraming(method string, code int, rh *h1.Head) Framing {
	switch {
	case method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified:
		return NoBody
	case rh.Chunked:
		return ChunkedBody
	case rh.ContentLength >= 0:
		return LengthBody
	}
	return CloseBody
}

// ErrUpstream marks an upstream that broke the protocol (a bad head, bad chunk framing, bytes
// nobody asked for): its connection is closed, never pooled.
var ErrUpstream = errors.New("upstream response")

// ResponseBody delimits one response body as its bytes arrive from the upstream, and says what
// to send the client for them: it is the one place the response direction's body framing is
// followed, and where a chunked body is decoded strictly and re-framed canonically
// (h1.Chunked). An engine hands it each buffered run of bytes, consumes n of them and forwards
// out.
type ResponseBody struct {
	Framing   Framing
	decode    bool // out is the body's data alone (the client's protocol frames it)
	remaining int64
	chunk     h1.Chunked
	done      bool
	buf       []byte     // re-framed output, reused
	trailers  []h1.Field // a chunked body's forwarded trailer fields, once it is done
}

// Reset starts a body of framing fr; contentLength is the head's (for LengthBody). With decode
// the output is the body's data alone, for a client protocol that frames it itself (HTTP/2),
// and the trailers are the caller's to send (Trailers); otherwise it is HTTP/1.1 framing,
// trailers included.
func (b *ResponseBody) Reset(fr Framing, contentLength int64, decode bool) {
	*b = ResponseBody{Framing: fr, remaining: contentLength, decode: decode,
		done: fr == NoBody || (fr == LengthBody && contentLength == 0),
		buf:  b.buf[:0], trailers: b.trailers[:0], chunk: h1.Chunked{Payload: decode, KeepTrailers: true}}
}

// Done reports that the whole body has been taken.
func (b *ResponseBody) Done() bool { return b.done }

// Trailers are the trailer fields of a chunked body that is done, without those that must not
// be forwarded (h1.Chunked.Trailers); they point into the body's buffers until the next Reset.
func (b *ResponseBody) Trailers() []h1.Field { return b.trailers }

// Next consumes the bytes at the start of data that belong to the body (n) and returns what to
// send the client for them (out: data[:n] itself, or re-framed bytes valid until the next
// call). A chunked body goes out in canonical framing, a close-delimited one is re-framed as
// chunked so the client connection survives it. A malformed chunked body is an ErrUpstream
// error (out then holds what came before the error, which ends no body).
func (b *ResponseBody) Next(data []byte) (n int, out []byte, err error) {
	switch b.Framing {
	case LengthBody:
		k := min(int64(len(data)), b.remaining)
		b.remaining -= k
		b.done = b.remaining == 0
		return int(k), data[:k], nil
	case ChunkedBody:
		// Re-framed canonically (h1.Chunked): what reaches the client is what the core parsed,
		// never the upstream's own framing. On a refusal out holds the canonical framing of the
		// bytes before the error, which ends no body; the engine closes the client connection.
		var k int
		var d bool
		var rej *h1.Rejection
		b.buf, k, d, rej = b.chunk.Append(b.buf[:0], data)
		b.done = d
		if rej != nil {
			return k, b.buf, errors.Join(ErrUpstream, rej)
		}
		if d {
			b.trailers = b.chunk.Trailers(b.trailers[:0])
			if !b.decode {
				b.buf = endChunked(b.buf, b.trailers)
			}
		}
		return k, b.buf, nil
	case CloseBody:
		if len(data) == 0 || b.decode {
			return len(data), data, nil
		}
		b.buf = AppendChunk(b.buf[:0], data)
		return len(data), b.buf, nil
	}
	return 0, nil, nil
}

// endChunked appends the end of a chunked body after its last chunk: the trailer fields, then
// the CRLF that ends the trailer section.
func endChunked(dst []byte, trailers []h1.Field) []byte {
	for _, f := range trailers {
		dst = append(append(append(append(dst, f.Name...), ": "...), f.Value...), "\r\n"...)
	}
	return append(dst, "\r\n"...)
}

// Finish ends a close-delimited body (one whose end the upstream's protocol marks, as HTTP/2's
// END_STREAM) with the upstream's trailer fields, screened by h1.TrailerAllowed, and returns
// what to send for the end: the last chunk and the trailers in HTTP/1.1 framing; nothing when
// decoding (the caller sends Trailers its own way).
func (b *ResponseBody) Finish(trailers []h1.Field) []byte {
	b.done = true
	b.trailers = b.trailers[:0]
	for _, f := range trailers {
		if h1.TrailerAllowed(f.Name) {
			b.trailers = append(b.trailers, f)
		}
	}
	if b.decode || b.Framing != CloseBody {
		return nil
	}
	return AppendLastChunk(b.buf[:0], b.trailers)
}

// End is told that the upstream closed. complete reports whether that ends the body (a
// close-delimited one, which is then done, and out is its last chunk) rather than truncating
// it.
func (b *ResponseBody) End() (out []byte, complete bool) {
	if b.Framing == CloseBody {
		b.done = true
		if b.decode {
			return nil, true
		}
		return lastChunk, true
	}
	return nil, b.done
}

// RequestBody delimits one request body as its bytes arrive from the client and says what to
// send the upstream for them: the one place the request direction's body framing is followed.
type RequestBody struct {
	chunked   bool
	frame     bool // the source is the body's data alone (NewStreamBody)
	payload   bool // the output is the data alone (NewRequestPayload)
	remaining int64
	chunk     h1.Chunked
	done      bool
	buf       []byte     // re-framed output, reused
	trailers  []h1.Field // a stream body's trailer fields (End)
}

// NewRequestBody starts the body of a request head h.
func NewRequestBody(h *h1.Head) RequestBody {
	rb := RequestBody{chunked: h.Chunked, remaining: max(h.ContentLength, 0), chunk: h1.Chunked{KeepTrailers: true}}
	rb.done = !h.Chunked && rb.remaining == 0
	return rb
}

// NewRequestPayload starts the body of a request head h for an upstream whose protocol frames
// the data itself (HTTP/2): the output is the body's data alone, a chunked body decoded (its
// trailer fields kept for Trailers).
func NewRequestPayload(h *h1.Head) RequestBody {
	rb := NewRequestBody(h)
	rb.chunk = h1.Chunked{Payload: true, KeepTrailers: true}
	rb.payload = true
	return rb
}

// NewStreamBody starts the body of a request whose data arrives without framing (an HTTP/2
// stream's DATA) and whose length is unknown: it goes to the upstream chunked (as it is, with
// payload, for an upstream that frames it itself), and End ends it when the stream does.
func NewStreamBody(payload bool) RequestBody { return RequestBody{frame: true, payload: payload} }

// Done reports that the whole body has been taken.
func (b *RequestBody) Done() bool { return b.done }

// Trailers appends the forwardable trailer fields of a body that is done to dst: a chunked
// body's (decoded for an HTTP/2 upstream: NewRequestPayload), or those a stream ended with.
func (b *RequestBody) Trailers(dst []h1.Field) []h1.Field {
	switch {
	case !b.done:
		return dst
	case b.frame:
		return append(dst, b.trailers...)
	case b.chunked:
		return b.chunk.Trailers(dst)
	}
	return dst
}

// End is told that the client's side of the body ended (EOF), with the trailer fields that
// ended a stream (an HTTP/2 request's; screened by h1.TrailerAllowed). complete reports whether
// that ends the body (a stream's, whose last chunk and trailers are out) rather than truncating
// it.
func (b *RequestBody) End(trailers []h1.Field) (out []byte, complete bool) {
	if b.frame && !b.done {
		b.done = true
		b.trailers = b.trailers[:0]
		for _, f := range trailers {
			if h1.TrailerAllowed(f.Name) {
				b.trailers = append(b.trailers, f)
			}
		}
		if b.payload {
			return nil, true
		}
		return AppendLastChunk(b.buf[:0], b.trailers), true
	}
	return nil, b.done
}

// Next consumes the bytes at the start of data that belong to the body (n) and returns what to
// send the upstream for them (out, valid until the next call; a chunked body re-framed
// canonically by h1.Chunked); malformed chunked framing is refused with h1's rejection (400),
// and no byte of out from that call may be forwarded.
func (b *RequestBody) Next(data []byte) (n int, out []byte, rej *h1.Rejection) {
	if b.frame {
		if len(data) == 0 || b.payload {
			return len(data), data, nil
		}
		b.buf = AppendChunk(b.buf[:0], data)
		return len(data), b.buf, nil
	}
	if b.chunked {
		// Re-framed canonically, as responses are: the upstream reads the framing the core
		// parsed, so no two parsers can disagree on where the body ends.
		var k int
		var d bool
		b.buf, k, d, rej = b.chunk.Append(b.buf[:0], data)
		b.done = d
		if d && rej == nil && !b.payload {
			b.buf = endChunked(b.buf, b.chunk.Trailers(nil))
		}
		return k, b.buf, rej
	}
	k := min(int64(len(data)), b.remaining)
	b.remaining -= k
	b.done = b.remaining == 0
	return int(k), data[:k], nil
}

// AppendChunk appends data as one chunk of a chunked body.
func AppendChunk(dst, data []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(data)), 16)
	return append(append(append(dst, "\r\n"...), data...), "\r\n"...)
}

// AppendLastChunk appends the end of a chunked body: the last chunk and the trailer fields.
func AppendLastChunk(dst []byte, trailers []h1.Field) []byte {
	return endChunked(append(dst, "0\r\n"...), trailers)
}

// lastChunk ends a re-framed chunked body.
var lastChunk = []byte("0\r\n\r\n")
