package h1

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// decodeAll feeds in pieces of the given size into a dst of dstSize bytes at a time and returns
// the output, the bytes left after the body, and the refusal.
func decodeAll(in string, piece, dstSize int) (out, rest string, rej *Rejection) {
	var d Chunked
	dst := make([]byte, dstSize)
	var o []byte
	src := []byte(in)
	for off := 0; off < len(src); {
		end := min(off+piece, len(src))
		p := src[off:end]
		for {
			nd, ns, done, r := d.Feed(dst, p)
			o = append(o, dst[:nd]...)
			p = p[ns:]
			off += ns
			if r != nil {
				return string(o), "", r
			}
			if done {
				return string(o), in[off:], nil
			}
			if len(p) == 0 && nd < len(dst) {
				break
			}
		}
	}
	// Out of input: flush what is pending (a body that ended exactly at the input's end).
	for {
		nd, _, done, r := d.Feed(dst, nil)
		o = append(o, dst[:nd]...)
		if r != nil {
			return string(o), "", r
		}
		if done {
			return string(o), "", nil
		}
		if nd == 0 {
			return string(o), "", &Rejection{0, "incomplete"}
		}
	}
}

var validChunked = []struct{ name, in, want string }{
	{"plain", "5\r\nhello\r\n0\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n"},
	{"empty body", "0\r\n\r\n", "0\r\n\r\n"},
	{"uppercase and leading zeros", "000A\r\n0123456789\r\n000\r\n\r\n", "a\r\n0123456789\r\n0\r\n\r\n"},
	{"extensions dropped", "5;a\r\nhello\r\n3 ; b = c ;d=\"e\\\"f\"\t;g=h\r\nabc\r\n0;last=1\r\n\r\n", "5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n"},
	{"quoted extension with obs-text", "1;q=\"\x80 \t\\\x81\"\r\nx\r\n0\r\n\r\n", "1\r\nx\r\n0\r\n\r\n"},
	{"trailers dropped", "1\r\nx\r\n0\r\nX-A: b\r\nX-B:\r\nx-c:\tv w \r\n\r\n", "1\r\nx\r\n0\r\n\r\n"},
	{"data holds CRLF and digits", "4\r\n\r\n0\r\r\n0\r\n\r\n", "4\r\n\r\n0\r\r\n0\r\n\r\n"},
	{"16 hex digits", "000000000000000" + "1\r\nx\r\n0\r\n\r\n", "1\r\nx\r\n0\r\n\r\n"},
}

var invalidChunked = []struct{ name, in string }{
	{"empty line before size", "\r\n5\r\nhello\r\n0\r\n\r\n"},
	{"bare LF size", "5\nhello\r\n0\r\n\r\n"},
	{"bare CR size", "5\rhello\r\n0\r\n\r\n"},
	{"space before size", " 5\r\nhello\r\n0\r\n\r\n"},
	{"space after size", "5 \r\nhello\r\n0\r\n\r\n"},
	{"tab after size", "5\t\r\nhello\r\n0\r\n\r\n"},
	{"sign", "+5\r\nhello\r\n0\r\n\r\n"},
	{"0x prefix", "0x5\r\nhello\r\n0\r\n\r\n"},
	{"not hex", "g\r\nhello\r\n0\r\n\r\n"},
	{"17 hex digits", "00000000000000001\r\nx\r\n0\r\n\r\n"},
	{"over int63", "8000000000000000\r\nx\r\n0\r\n\r\n"},
	{"ffffffffffffffff", "ffffffffffffffff\r\nx\r\n0\r\n\r\n"},
	{"data without CRLF", "5\r\nhello0\r\n\r\n"},
	{"data with bare LF", "5\r\nhello\n0\r\n\r\n"},
	{"data with LF CR", "5\r\nhello\n\r0\r\n\r\n"},
	{"extension without name", "5;\r\nhello\r\n0\r\n\r\n"},
	{"extension space then CR", "5;a \r\nhello\r\n0\r\n\r\n"},
	{"extension empty value", "5;a=\r\nhello\r\n0\r\n\r\n"},
	{"extension unterminated quote", "5;a=\"b\r\nhello\r\n0\r\n\r\n"},
	{"extension bad char", "5;a=b@c\r\nhello\r\n0\r\n\r\n"},
	{"extension NUL in quote", "5;a=\"\x00\"\r\nhello\r\n0\r\n\r\n"},
	{"extension value then token", "5;a=\"b\"c\r\nhello\r\n0\r\n\r\n"},
	{"last chunk bare LF", "0\n\r\n"},
	{"end bare LF", "0\r\n\n"},
	{"trailer folded", "0\r\nX-A: b\r\n c\r\n\r\n"},
	{"trailer no colon", "0\r\nnot a field\r\n\r\n"},
	{"trailer space before colon", "0\r\nX-A : b\r\n\r\n"},
	{"trailer empty name", "0\r\n: b\r\n\r\n"},
	{"trailer NUL", "0\r\nX-A: b\x00\r\n\r\n"},
	{"trailer bare CR", "0\r\nX-A: b\rc\r\n\r\n"},
	{"trailer bare LF", "0\r\nX-A: b\n\r\n"},
	{"long extension", "1;a=" + strings.Repeat("b", maxChunkLine) + "\r\nx\r\n0\r\n\r\n"},
	{"long trailer", "0\r\nX: " + strings.Repeat("b", maxTrailer) + "\r\n\r\n"},
}

func TestChunkedDecoder(t *testing.T) {
	const next = "GET /next HTTP/1.1\r\n\r\n"
	for _, tc := range validChunked {
		t.Run(tc.name, func(t *testing.T) {
			for _, piece := range []int{1, 2, 3, 7, len(tc.in) + len(next)} {
				for _, dstSize := range []int{1, 2, 5, 64 << 10} {
					out, rest, rej := decodeAll(tc.in+next, piece, dstSize)
					if rej != nil || out != tc.want || rest != next {
						t.Fatalf("piece %d dst %d: out %q rest %q rej %v, want %q", piece, dstSize, out, rest, rej, tc.want)
					}
				}
			}
			var d Chunked
			n, done, rej := d.Check([]byte(tc.in + next))
			if rej != nil || !done || n != len(tc.in) {
				t.Errorf("Check = %d %v %v, want %d true nil", n, done, rej, len(tc.in))
			}
		})
	}
	for _, tc := range invalidChunked {
		t.Run(tc.name, func(t *testing.T) {
			for _, piece := range []int{1, 3, len(tc.in)} {
				if _, _, rej := decodeAll(tc.in, piece, 3); rej == nil || rej.Status != 400 {
					t.Fatalf("piece %d: rejection %v, want 400", piece, rej)
				}
			}
			var d Chunked
			if _, _, rej := d.Check([]byte(tc.in)); rej == nil {
				t.Error("Check accepted it")
			}
			if _, _, _, rej := d.Feed(make([]byte, 10), []byte("0\r\n\r\n")); rej == nil {
				t.Error("a refusal is not sticky")
			}
		})
	}
}

func TestChunkedAppendAndReuse(t *testing.T) {
	var d Chunked
	in := []byte("3;x\r\nabc\r\n0\r\n\r\n1\r\nz\r\n0\r\nT: 1\r\n\r\n")
	out, n, done, rej := d.Append(nil, in)
	if rej != nil || !done || string(out) != "3\r\nabc\r\n0\r\n\r\n" {
		t.Fatalf("first body: %q %v %v", out, done, rej)
	}
	out, m, done, rej := d.Append(out[:0], in[n:])
	if rej != nil || !done || n+m != len(in) || string(out) != "1\r\nz\r\n0\r\n\r\n" {
		t.Fatalf("second body: %q %d %v %v", out, n+m, done, rej)
	}
}

func TestChunkedFeedAllocatesNothing(t *testing.T) {
	in := []byte("5;a=b\r\nhello\r\n1A\r\n" + strings.Repeat("x", 26) + "\r\n0\r\nT: v\r\n\r\n")
	dst := make([]byte, 7)
	allocs := testing.AllocsPerRun(100, func() {
		var d Chunked
		for src := in; ; {
			_, ns, done, _ := d.Feed(dst, src)
			src = src[ns:]
			if done {
				return
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Feed allocated %v times per body", allocs)
	}
}

func TestChunkedReader(t *testing.T) {
	in := "5;a\r\nhello\r\n000B\r\n0123456789a\r\n0\r\nX: y\r\n\r\nNEXT"
	r := NewChunkedReader(iotest.OneByteReader(strings.NewReader(in)), make([]byte, 3))
	got, err := io.ReadAll(iotest.HalfReader(r))
	if err != nil || string(got) != "5\r\nhello\r\nb\r\n0123456789a\r\n0\r\n\r\n" {
		t.Fatalf("read %q, %v", got, err)
	}
	if rest := string(r.Rest()); !strings.HasPrefix("NEXT", rest) {
		t.Errorf("rest %q", rest)
	}
	for _, tc := range []struct {
		in   string
		want error
	}{{"5\r\nhel", io.ErrUnexpectedEOF}, {"5\nhello\r\n0\r\n\r\n", errChunkSize}} {
		_, err := io.ReadAll(NewChunkedReader(strings.NewReader(tc.in), nil))
		if err != tc.want {
			t.Errorf("%q: error %v, want %v", tc.in, err, tc.want)
		}
	}
	var zero bytes.Buffer
	if n, err := NewChunkedReader(&zero, nil).Read(nil); n != 0 || err != nil {
		t.Errorf("zero-length read = %d, %v", n, err)
	}
}

// With Payload the output is the data alone; with KeepTrailers the trailer fields are kept
// (those that may travel in a trailer) and the final CRLF is the caller's. Fed byte by byte,
// and twice through one decoder, so a second body's trailers replace the first's.
func TestChunkedPayloadAndTrailers(t *testing.T) {
	in := "5;x=y\r\nhello\r\n3\r\nabc\r\n0\r\nX-Sum:  42 \r\nContent-Length: 9\r\nGrpc-Status: 0\r\n\r\nNEXT"
	for _, payload := range []bool{true, false} {
		d := Chunked{Payload: payload, KeepTrailers: true}
		for round := range 2 {
			var out []byte
			n := 0
			for done := false; !done; {
				var k int
				var rej *Rejection
				out, k, done, rej = d.Append(out, []byte(in[n:n+1]))
				if rej != nil {
					t.Fatalf("round %d: %v", round, rej)
				}
				n += k
			}
			want := "5\r\nhello\r\n3\r\nabc\r\n0\r\n"
			if payload {
				want = "helloabc"
			}
			if string(out) != want || in[n:] != "NEXT" {
				t.Errorf("payload %v round %d: out %q, rest %q; want %q and NEXT", payload, round, out, in[n:], want)
			}
			var got []string
			for _, f := range d.Trailers(nil) {
				got = append(got, string(f.Name)+"="+string(f.Value))
			}
			if strings.Join(got, ",") != "X-Sum=42,Grpc-Status=0" {
				t.Errorf("payload %v round %d: trailers %q, want X-Sum=42,Grpc-Status=0 (Content-Length dropped)", payload, round, got)
			}
		}
	}
}
