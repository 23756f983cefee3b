package h2

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// TestInlineAnswers: Config.Inline answers a stream on the reader with TryRespond, and the
// Handler never runs for it; a response TryRespond cannot send at once (a body past the
// client's stream window) is refused with nothing sent, and the Handler answers it whole.
func TestInlineAnswers(t *testing.T) {
	small, big := "small", strings.Repeat("b", 70000) // past the default 65,535-byte window
	handled := make(chan string, 4)
	body := func(st *Stream) string {
		if st.Path == "/big" {
			return big
		}
		return small
	}
	srv, cli := net.Pipe()
	c := NewConn(srv, Config{MaxHeaderBytes: 4096, Inline: func(st *Stream) bool {
		return st.TryRespond(AppendStatus(nil, 200), []byte(body(st)))
	}}, func(st *Stream) {
		handled <- st.Path
		_ = st.Respond(AppendStatus(nil, 200), []byte(body(st)), true)
	})
	go c.Serve()
	t.Cleanup(c.Close)
	_ = cli.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(cli, http2.ClientPreface)
	fr := http2.NewFramer(cli, bufio.NewReader(cli))
	// net.Pipe does not buffer: the client writes from one goroutine of its own, in order.
	writes := make(chan func() error, 16)
	t.Cleanup(func() { close(writes) })
	go func() {
		for w := range writes {
			_ = w()
		}
	}()
	writes <- func() error { return fr.WriteSettings() }
	get := func(id uint32, path string) string {
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "t"}, {":path", path}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		writes <- func() error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
		}
		var got []byte
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			switch f := f.(type) {
			case *http2.DataFrame:
				got = append(got, f.Data()...)
				if n := uint32(len(f.Data())); n > 0 {
					writes <- func() error { fr.WriteWindowUpdate(0, n); return fr.WriteWindowUpdate(id, n) }
				}
				if f.StreamEnded() {
					return string(got)
				}
			case *http2.SettingsFrame:
				if !f.IsAck() {
					writes <- fr.WriteSettingsAck
				}
			}
		}
	}
	if got := get(1, "/small"); got != small {
		t.Fatalf("inline answer %q, want %q", got, small)
	}
	if got := get(3, "/big"); got != big {
		t.Fatalf("big answer: %d bytes, want %d", len(got), len(big))
	}
	if got := get(5, "/small"); got != small {
		t.Fatalf("inline answer %q, want %q", got, small)
	}
	close(handled)
	var paths []string
	for p := range handled {
		paths = append(paths, p)
	}
	if strings.Join(paths, " ") != "/big" {
		t.Fatalf("the Handler served %v, want only /big", paths)
	}
}
