package h2

import (
	"encoding/binary"

	"golang.org/x/net/http2"
)

// Frames are appended to the connection's write buffer by hand (a 9-byte header and the
// payload), under the connection lock: every frame the proxy sends is built here, so the writer
// goroutine can send whatever accumulated in one write.

// appendFrameHeader appends a frame header (RFC 9113 4.1).
func appendFrameHeader(dst []byte, length int, t http2.FrameType, flags http2.Flags, stream uint32) []byte {
	return append(dst, byte(length>>16), byte(length>>8), byte(length), byte(t), byte(flags),
		byte(stream>>24)&0x7f, byte(stream>>16), byte(stream>>8), byte(stream))
}

func appendSettings(dst []byte, settings ...http2.Setting) []byte {
	dst = appendFrameHeader(dst, 6*len(settings), http2.FrameSettings, 0, 0)
	for _, s := range settings {
		dst = binary.BigEndian.AppendUint16(dst, uint16(s.ID))
		dst = binary.BigEndian.AppendUint32(dst, s.Val)
	}
	return dst
}

func appendWindowUpdate(dst []byte, stream uint32, incr uint32) []byte {
	dst = appendFrameHeader(dst, 4, http2.FrameWindowUpdate, 0, stream)
	return binary.BigEndian.AppendUint32(dst, incr&0x7fffffff)
}

func appendRST(dst []byte, stream uint32, code http2.ErrCode) []byte {
	dst = appendFrameHeader(dst, 4, http2.FrameRSTStream, 0, stream)
	return binary.BigEndian.AppendUint32(dst, uint32(code))
}

func appendGoAway(dst []byte, last uint32, code http2.ErrCode) []byte {
	dst = appendFrameHeader(dst, 8, http2.FrameGoAway, 0, 0)
	dst = binary.BigEndian.AppendUint32(dst, last&0x7fffffff)
	return binary.BigEndian.AppendUint32(dst, uint32(code))
}

// appendHeaders appends a header block as HEADERS and, past maxFrame, CONTINUATION frames.
func appendHeaders(dst []byte, stream uint32, block []byte, end bool, maxFrame int) []byte {
	t, flags := http2.FrameHeaders, http2.Flags(0)
	if end {
		flags = http2.FlagHeadersEndStream
	}
	for first := true; first || len(block) > 0; first = false {
		n := min(len(block), maxFrame)
		f := flags
		if n == len(block) {
			f |= http2.FlagHeadersEndHeaders
		}
		dst = append(appendFrameHeader(dst, n, t, f, stream), block[:n]...)
		block = block[n:]
		t, flags = http2.FrameContinuation, 0
	}
	return dst
}

// The response header block is encoded without the dynamic table and without Huffman coding
// (RFC 7541: indexed :status where the static table has it, otherwise literals without
// indexing, names indexed where the static table has them). That is valid HPACK, keeps no
// encoder state (so blocks can be built outside the connection lock, in any order) and
// allocates nothing; the cost is some bytes on the wire per response.

// staticStatus are the :status values with a static-table entry (RFC 7541 appendix A).
var staticStatus = map[int]byte{200: 8, 204: 9, 206: 10, 304: 11, 400: 12, 404: 13, 500: 14}

// staticNames are response field names with a static-table entry.
var staticNames = map[string]byte{
	"accept-ranges": 18, "age": 21, "allow": 22, "cache-control": 24, "content-disposition": 25,
	"content-encoding": 26, "content-language": 27, "content-length": 28, "content-location": 29,
	"content-range": 30, "content-type": 31, "date": 33, "etag": 34, "expires": 36,
	"last-modified": 44, "link": 45, "location": 46, "refresh": 47, "retry-after": 53,
	"server": 54, "set-cookie": 55, "strict-transport-security": 56, "transfer-encoding": 57,
	"vary": 59, "via": 60, "www-authenticate": 61,
}

// appendInt appends an HPACK integer with an n-bit prefix whose high bits are first.
func appendInt(dst []byte, first byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(dst, first|byte(v))
	}
	dst = append(dst, first|byte(max))
	v -= max
	for v >= 128 {
		dst = append(dst, byte(v&0x7f)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

// AppendStatus appends the :status field of a response header block.
func AppendStatus(dst []byte, code int) []byte {
	if i, ok := staticStatus[code]; ok {
		return append(dst, 0x80|i)
	}
	dst = append(dst, 0x08, 3) // literal without indexing, name :status (index 8), 3 bytes
	return append(dst, byte('0'+code/100%10), byte('0'+code/10%10), byte('0'+code%10))
}

// AppendField appends a field, its name lowered to HTTP/2's lowercase (name must be a token:
// the caller's head parser checked it).
func AppendField(dst, name, value []byte) []byte {
	var low [32]byte
	if len(name) <= len(low) {
		for i, ch := range name {
			if 'A' <= ch && ch <= 'Z' {
				ch += 'a' - 'A'
			}
			low[i] = ch
		}
		if i, ok := staticNames[string(low[:len(name)])]; ok {
			dst = appendInt(dst, 0, 4, uint64(i))
			dst = appendInt(dst, 0, 7, uint64(len(value)))
			return append(dst, value...)
		}
	}
	dst = appendInt(append(dst, 0), 0, 7, uint64(len(name)))
	for _, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		dst = append(dst, ch)
	}
	dst = appendInt(dst, 0, 7, uint64(len(value)))
	return append(dst, value...)
}
