// Package h1test holds test peers for HTTP/1.1 framing: a lenient raw origin that records the
// bytes it receives, and a reader of canonical chunked framing. The l7 and edge tests use them
// to check what really goes over the wire.
package h1test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// LenientOrigin is a raw TCP origin that records every byte it receives and reads requests the
// way a lenient server does: bare LF lines, whitespace around chunk sizes, any trailer line, and
// the two bytes after chunk data skipped unread. A request hidden in a body that a proxy passes
// on unchanged reaches it as a request of its own.
type LenientOrigin struct {
	// Addr is the origin's loopback address.
	Addr    string
	respond func(target string) string

	mu      sync.Mutex
	got     []byte
	targets []string
}

// StartLenientOrigin listens on a loopback port until the test ends; respond, when set, gives
// the raw response to a request for target (default: 200 "ok").
func StartLenientOrigin(t testing.TB, respond func(target string) string) *LenientOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &LenientOrigin{Addr: ln.Addr().String(), respond: respond}
	var conns sync.WaitGroup
	t.Cleanup(func() { ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				o.serve(c)
			}()
		}
	}()
	return o
}

// Write records bytes received (the tee of every connection).
func (o *LenientOrigin) Write(p []byte) (int, error) {
	o.mu.Lock()
	o.got = append(o.got, p...)
	o.mu.Unlock()
	return len(p), nil
}

// Received returns every byte received so far, and the targets of the requests read.
func (o *LenientOrigin) Received() ([]byte, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]byte(nil), o.got...), append([]string(nil), o.targets...)
}

func (o *LenientOrigin) serve(c net.Conn) {
	br := bufio.NewReader(io.TeeReader(c, o))
	line := func() (string, bool) {
		l, err := br.ReadString('\n')
		return strings.TrimRight(l, "\r\n"), err == nil
	}
	for {
		first, ok := line()
		for ok && first == "" {
			first, ok = line()
		}
		if !ok {
			return
		}
		parts := strings.Fields(first)
		if len(parts) < 2 {
			return
		}
		chunked, cl := false, 0
		for {
			l, ok := line()
			if !ok {
				return
			}
			if l == "" {
				break
			}
			k, v, _ := strings.Cut(l, ":")
			switch strings.ToLower(strings.TrimSpace(k)) {
			case "transfer-encoding":
				chunked = strings.Contains(strings.ToLower(v), "chunked")
			case "content-length":
				cl, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		o.mu.Lock()
		o.targets = append(o.targets, parts[1])
		o.mu.Unlock()
		if chunked {
			for {
				l, ok := line()
				if !ok {
					return
				}
				l, _, _ = strings.Cut(l, ";")
				n, err := strconv.ParseInt(strings.TrimSpace(l), 16, 64)
				if err != nil {
					return
				}
				if n == 0 {
					for l, ok := line(); ok && l != ""; l, ok = line() {
					}
					break
				}
				if _, err := br.Discard(int(n) + 2); err != nil { // the CRLF is not checked
					return
				}
			}
		} else if _, err := br.Discard(cl); err != nil {
			return
		}
		resp := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		if o.respond != nil {
			resp = o.respond(parts[1])
		}
		if _, err := io.WriteString(c, resp); err != nil {
			return
		}
	}
}

// CanonicalChunks decodes a chunked body written canonically (lowercase hex without leading
// zeros, no extensions; trailer fields "Name: value") and returns its data.
func CanonicalChunks(b []byte) (string, bool) {
	var data []byte
	for {
		line, rest, ok := bytes.Cut(b, []byte("\r\n"))
		if !ok || len(line) == 0 || (line[0] == '0' && len(line) > 1) || bytes.ContainsAny(line, "ABCDEF; \t\n\r") {
			return "", false
		}
		n, err := strconv.ParseInt(string(line), 16, 64)
		if err != nil || int64(len(rest)) < n+2 || string(rest[n:n+2]) != "\r\n" && n > 0 {
			return "", false
		}
		if n == 0 {
			for {
				tl, after, ok := bytes.Cut(rest, []byte("\r\n"))
				if !ok {
					return "", false
				}
				if len(tl) == 0 {
					return string(data), len(after) == 0
				}
				if k, _, ok := bytes.Cut(tl, []byte(": ")); !ok || len(k) == 0 || bytes.ContainsAny(k, " \t") {
					return "", false
				}
				rest = after
			}
		}
		data = append(data, rest[:n]...)
		b = rest[n+2:]
	}
}
