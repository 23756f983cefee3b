package h2

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"
)

// The response encoder (static-table indices, literals without indexing, no Huffman) must
// produce blocks any HPACK decoder reads back exactly, with names lowered.
func TestResponseBlockDecodes(t *testing.T) {
	long := strings.Repeat("v", 300) // a length past the 7-bit prefix
	fields := [][2]string{
		{"Content-Type", "application/json"}, {"Content-Length", "42"}, {"X-Custom-Header", "a b"},
		{"Set-Cookie", "k=v"}, {"VIA", "1.1 switchyard"}, {"X-Long", long},
		{strings.Repeat("N", 40), "long name"}, {"Date", ""},
	}
	for _, code := range []int{200, 204, 304, 404, 500, 103, 302, 503, 599} {
		b := AppendStatus(nil, code)
		for _, f := range fields {
			b = AppendField(b, []byte(f[0]), []byte(f[1]))
		}
		got, err := hpack.NewDecoder(4096, nil).DecodeFull(b)
		if err != nil {
			t.Fatalf("status %d: decode: %v", code, err)
		}
		if len(got) != len(fields)+1 || got[0].Name != ":status" || got[0].Value != fmt.Sprint(code) {
			t.Fatalf("status %d: decoded %v", code, got)
		}
		for i, f := range fields {
			if g := got[i+1]; g.Name != strings.ToLower(f[0]) || g.Value != f[1] || g.Sensitive {
				t.Errorf("status %d field %d: got %q: %q, want %q: %q", code, i, g.Name, g.Value, strings.ToLower(f[0]), f[1])
			}
		}
	}
}

// Header blocks larger than a frame are split into HEADERS and CONTINUATION frames.
func TestHeadersSplitIntoContinuation(t *testing.T) {
	block := make([]byte, 40000)
	out := appendHeaders(nil, 5, block, true, 16384)
	// 3 frames: 16384 + 16384 + 7232, each with a 9-byte header.
	if len(out) != 40000+27 {
		t.Fatalf("framed %d bytes, want %d", len(out), 40000+27)
	}
	if out[3] != 0x1 || out[4]&0x4 != 0 || out[4]&0x1 == 0 {
		t.Errorf("first frame type %d flags %#x, want HEADERS with END_STREAM, without END_HEADERS", out[3], out[4])
	}
	last := out[9+16384+9+16384:]
	if last[3] != 0x9 || last[4] != 0x4 {
		t.Errorf("last frame type %d flags %#x, want CONTINUATION with END_HEADERS", last[3], last[4])
	}
}
