package h1

import (
	"io"
	"net"
	"strings"
	"testing"
)

// feedAll pushes input through the state machine in pieces of the given size and returns the
// bytes released to the server and the rejection, if any.
func feedAll(input string, piece int) (string, *Rejection) {
	c := Guard(nil, 1024, nil)
	for i := 0; i < len(input); i += piece {
		end := min(i+piece, len(input))
		if rej := c.feed([]byte(input[i:end])); rej != nil {
			return string(c.out), rej
		}
	}
	return string(c.out), nil
}

func TestFramingAcrossArbitrarySplits(t *testing.T) {
	good := "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n" +
		"\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 9\r\n\r\nCL: 1\r\n\r\n" + // body looks like a head: must not be inspected
		"GET /c HTTP/1.1\r\nHost: a\r\n\r\n"
	for _, piece := range []int{1, 2, 3, 7, 64, len(good)} {
		out, rej := feedAll(good, piece)
		if rej != nil || out != good {
			t.Fatalf("piece %d: rejection %v, released %d of %d bytes", piece, rej, len(out), len(good))
		}
	}
	bad := good + "GET /d HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, piece := range []int{1, 5, len(bad)} {
		out, rej := feedAll(bad, piece)
		if rej == nil || rej.Status != 400 || out != good {
			t.Errorf("piece %d: rejection %v, released %q", piece, rej, out)
		}
	}
}

func TestOversizedHeadAndPassThrough(t *testing.T) {
	if _, rej := feedAll("GET / HTTP/1.1\r\nX: "+strings.Repeat("a", 2000), 100); rej == nil || rej.Status != 431 {
		t.Errorf("oversized head: %v", rej)
	}
	up := "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x00\x01 not http: x\r\n\r\n"
	if out, rej := feedAll(up, 3); rej != nil || out != up {
		t.Errorf("upgrade stream was screened: %v", rej)
	}
	h2 := "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00"
	if out, rej := feedAll(h2, 4); rej != nil || out != h2 {
		t.Errorf("h2 preface was screened: %v", rej)
	}
}

func TestRefusalIsWrittenOnClose(t *testing.T) {
	client, server := net.Pipe()
	c := Guard(server, 1024, nil)
	go func() {
		io.WriteString(client, "GET / HTTP/1.1\r\nX-A: b\r\n folded\r\n\r\n")
	}()
	buf := make([]byte, 100)
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("read of a refused head = %v, want EOF", err)
	}
	go c.Close()
	got, _ := io.ReadAll(client)
	if !strings.HasPrefix(string(got), "HTTP/1.1 400 Bad Request") || !strings.Contains(string(got), "folding") {
		t.Errorf("refusal = %q", got)
	}
}

// The head of a chunked request is held back until its body is checked, so a malformed body is
// refused before the server sees any of the request; with Expect it is not held.
func TestChunkedHeadHeldUntilBodyChecked(t *testing.T) {
	head := "POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
	if out, rej := feedAll(head+"5\r\nhello\r\n", 4); rej != nil || out != "" {
		t.Fatalf("released %q before the body ended (%v)", out, rej)
	}
	if out, rej := feedAll(head+"5\r\nhello0\r\n\r\n", 4); rej == nil || out != "" {
		t.Fatalf("malformed body: released %q, rejection %v", out, rej)
	}
	exp := "POST /a HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
	if out, rej := feedAll(exp, 4); rej != nil || out != exp {
		t.Fatalf("Expect head held back: %q %v", out, rej)
	}
}
