package core

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/switchyard/switchyard/l7/guard"
)

// Framing is how a response body is delimited.
type Framing int

// The response framings.
const (
	NoBody      Framing = iota // HEAD, 204, 304 (1xx heads have none either)
	LengthBody                 // Content-Length
	ChunkedBody                // chunked, passed on with its framing
	CloseBody                  // ends when the upstream closes; sent to the client chunked
)

// ResponseFraming decides the framing of a final response to method with the given head.
func ResponseFraming(method string, code int, rh *guard.Head) Framing {
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

// ResponseBody delimits one response body as its bytes arrive from the upstream. It is the one
// place the response direction's framing is followed; an engine hands it each buffered run of
// bytes and forwards what Take says belongs to the body.
type ResponseBody struct {
	Framing   Framing
	remaining int64
	chunk     guard.ChunkScanner
	done      bool
}

// NewResponseBody starts a body of framing fr; contentLength is the head's (for LengthBody).
func NewResponseBody(fr Framing, contentLength int64) ResponseBody {
	return ResponseBody{Framing: fr, remaining: contentLength, done: fr == NoBody}
}

// Done reports that the whole body has been taken.
func (b *ResponseBody) Done() bool { return b.done }

// EndOfStream is told that the upstream closed. It reports whether that ends the body (a
// close-delimited one, which is then done) rather than truncating it.
func (b *ResponseBody) EndOfStream() bool {
	if b.Framing == CloseBody {
		b.done = true
		return true
	}
	return b.done
}

// Take returns how many bytes at the start of data belong to the body (all of them for a
// close-delimited body). A malformed chunked body is an ErrUpstream error.
func (b *ResponseBody) Take(data []byte) (int, error) {
	switch b.Framing {
	case LengthBody:
		n := min(int64(len(data)), b.remaining)
		b.remaining -= n
		b.done = b.remaining == 0
		return int(n), nil
	case ChunkedBody:
		n, d, rej := b.chunk.Scan(data)
		b.done = d
		if rej != nil {
			return n, errors.Join(ErrUpstream, rej)
		}
		return n, nil
	case CloseBody:
		return len(data), nil
	}
	return 0, nil
}

// RequestBody delimits one request body as its bytes arrive from the client: the one place the
// request direction's framing is followed.
type RequestBody struct {
	chunked   bool
	remaining int64
	chunk     guard.ChunkScanner
	done      bool
}

// NewRequestBody starts the body of a request head h.
func NewRequestBody(h *guard.Head) RequestBody {
	rb := RequestBody{chunked: h.Chunked, remaining: max(h.ContentLength, 0)}
	rb.done = !h.Chunked && rb.remaining == 0
	return rb
}

// Done reports that the whole body has been taken.
func (b *RequestBody) Done() bool { return b.done }

// Remaining is the Content-Length still to come (0 for chunked bodies).
func (b *RequestBody) Remaining() int64 { return b.remaining }

// Take returns how many bytes at the start of data belong to the body; a malformed chunk is
// refused with the guard's rejection.
func (b *RequestBody) Take(data []byte) (int, *guard.Rejection) {
	if b.chunked {
		n, d, rej := b.chunk.Scan(data)
		b.done = d
		return n, rej
	}
	n := min(int64(len(data)), b.remaining)
	b.remaining -= n
	b.done = b.remaining == 0
	return int(n), nil
}

// AppendChunk appends data as one chunk of a chunked body (a close-delimited response is
// re-framed so the client connection survives it).
func AppendChunk(dst, data []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(data)), 16)
	return append(append(append(dst, "\r\n"...), data...), "\r\n"...)
}

// LastChunk ends a re-framed chunked body.
var LastChunk = []byte("0\r\n\r\n")
