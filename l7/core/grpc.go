package core

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/internal/h1"
)

// gRPC status codes the proxy answers with (the values of google.golang.org/grpc/codes, named
// here so that the core needs no gRPC import).
const (
	GRPCCanceled          = 1
	GRPCUnknown           = 2
	GRPCDeadlineExceeded  = 4
	GRPCPermissionDenied  = 7
	GRPCResourceExhausted = 8
	GRPCUnimplemented     = 12
	GRPCInternal          = 13
	GRPCUnavailable       = 14
	GRPCUnauthenticated   = 16
)

// GRPCCodes are gRPC's status codes by name (google.golang.org/grpc/codes), for configuration.
var GRPCCodes = map[string]int{"OK": 0, "CANCELLED": 1, "UNKNOWN": 2, "INVALID_ARGUMENT": 3,
	"DEADLINE_EXCEEDED": 4, "NOT_FOUND": 5, "ALREADY_EXISTS": 6, "PERMISSION_DENIED": 7,
	"RESOURCE_EXHAUSTED": 8, "FAILED_PRECONDITION": 9, "ABORTED": 10, "OUT_OF_RANGE": 11,
	"UNIMPLEMENTED": 12, "INTERNAL": 13, "UNAVAILABLE": 14, "DATA_LOSS": 15, "UNAUTHENTICATED": 16}

// IsGRPC reports whether a request's Content-Type is gRPC's ("application/grpc", alone or with
// a "+proto"-style suffix or parameters): a gRPC client reads failures from grpc-status, never
// from an HTTP status or an HTML body.
func IsGRPC(contentType string) bool {
	rest, ok := strings.CutPrefix(strings.ToLower(contentType), "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// IsGRPCWeb reports whether a Content-Type is gRPC-Web's binary one ("application/grpc-web",
// alone or with a "+proto"-style suffix or parameters), which browsers send: the messages are
// framed as gRPC's, and the trailers come as a last frame of the body. ("application/grpc-web-text",
// the same base64-encoded, is not one.)
func IsGRPCWeb(contentType string) bool {
	rest, ok := strings.CutPrefix(strings.ToLower(contentType), "application/grpc-web")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}

// GRPCWebToGRPC is the gRPC Content-Type of a gRPC-Web one ("application/grpc-web+proto" is
// "application/grpc+proto"), and GRPCToGRPCWeb the way back.
func GRPCWebToGRPC(ct string) string {
	return "application/grpc" + ct[len("application/grpc-web"):]
}

// GRPCToGRPCWeb is the gRPC-Web Content-Type of a gRPC response's.
func GRPCToGRPCWeb(ct string) string {
	if !IsGRPC(ct) {
		return "application/grpc-web+proto"
	}
	return "application/grpc-web" + ct[len("application/grpc"):]
}

// AppendGRPCWebTrailers appends the frame that carries a gRPC response's trailers in a gRPC-Web
// body: flag 0x80, the length, then "name: value" lines with lowercase names, each ending in
// CRLF (the gRPC-Web protocol, PROTOCOL-WEB.md).
func AppendGRPCWebTrailers(dst []byte, fields []h1.Field) []byte {
	start := len(dst)
	dst = append(dst, 0x80, 0, 0, 0, 0)
	for _, f := range fields {
		for _, c := range f.Name {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
		}
		dst = append(append(append(dst, ": "...), f.Value...), "\r\n"...)
	}
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-5))
	return dst
}

// GRPCStatus is the gRPC status that stands for an HTTP status the proxy itself answers:
// gRPC's HTTP-to-status mapping (doc/http-grpc-status-mapping.md), with the proxy's own reasons
// made exact. shed marks deliberate load shedding (and rate limits): RESOURCE_EXHAUSTED, which
// a client backs off from, rather than UNAVAILABLE, which it retries at once.
func GRPCStatus(httpStatus int, shed bool) int {
	switch {
	case shed || httpStatus == 429 || httpStatus == 431:
		return GRPCResourceExhausted
	case httpStatus == 504:
		return GRPCDeadlineExceeded
	case httpStatus == 502 || httpStatus == 503:
		return GRPCUnavailable
	case httpStatus == 499:
		return GRPCCanceled
	case httpStatus == 400:
		return GRPCInternal
	case httpStatus == 401:
		return GRPCUnauthenticated
	case httpStatus == 403:
		return GRPCPermissionDenied
	case httpStatus == 404 || httpStatus == 405:
		return GRPCUnimplemented
	}
	return GRPCUnknown
}

// GRPCTimeout parses a grpc-timeout value (1 to 8 digits and a unit: H, M, S, m, u or n).
func GRPCTimeout(v string) (time.Duration, bool) {
	if len(v) < 2 || len(v) > 9 {
		return 0, false
	}
	n, err := strconv.ParseUint(v[:len(v)-1], 10, 64)
	if err != nil || v[0] == '+' {
		return 0, false
	}
	unit := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second,
		'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}[v[len(v)-1]]
	if unit == 0 {
		return 0, false
	}
	if n > uint64(1<<63-1)/uint64(unit) {
		return 1<<63 - 1, true
	}
	return time.Duration(n) * unit, true
}

// GRPCMessage percent-encodes msg for grpc-message: bytes outside printable ASCII, and '%'.
func GRPCMessage(msg string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
