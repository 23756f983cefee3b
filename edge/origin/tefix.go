package origin

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/switchyard/switchyard/internal/h1"
)

// teConn sits under Go's HTTP client on every upstream connection and follows the response
// framing (heads, Content-Length and chunked bodies, 1xx, bodiless statuses) so that it can
// rewrite the one thing Go's client refuses outright: a Transfer-Encoding other than a lone
// "chunked". Such a head is rewritten before Go reads it: the Transfer-Encoding (and a
// Content-Length it overrides, RFC 9112 6.3) is removed, "Transfer-Encoding: chunked" is put back
// when chunked is the final coding, otherwise the body runs until the origin closes (the
// connection is then used for nothing else), and the other codings are named in
// teCodingsHeader for UndoCodings to undo. Anything it cannot follow exactly makes it
// step aside and pass bytes unchanged for the rest of the connection. Only the response is read
// here; the fetch is never repeated, so the origin sees each request once.

// teCodingsHeader carries the transfer codings teConn removed, to UndoCodings.
const teCodingsHeader = "X-Switchyard-Transfer-Codings"

// maxHead bounds a response head teConn gathers; a longer one is passed to Go as it is.
const maxHead = 64 << 10

var httpVersion = []byte("HTTP/1.")

type teState int

const (
	teHead    teState = iota // reading a response head
	teFixed                  // a Content-Length body: left bytes to pass
	teChunked                // a chunked body, followed by chunk
	tePass                   // until close, or stepped aside: pass everything
)

type teConn struct {
	net.Conn
	mu      sync.Mutex // Write (the request's method) and Read run on different goroutines
	methods []string   // methods of requests written and not yet answered
	written bool       // the current request's first bytes were written

	st    teState
	left  int64
	chunk h1.Chunked
	head  []byte // a head being gathered
	out   []byte // rewritten bytes not yet returned
	buf   []byte
}

// Write notes the method of each request written, for bodiless HEAD responses. Go's client
// writes a request only once the previous response was read, so a request's first Write after
// a response ended starts with its method.
func (c *teConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.written {
		method := "?"
		if sp := bytes.IndexByte(p, ' '); sp > 0 && sp < 16 {
			method = string(p[:sp])
		}
		c.methods, c.written = append(c.methods, method), true
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// responseDone lets the next Write start a new request.
func (c *teConn) responseDone() {
	c.mu.Lock()
	c.written = false
	c.mu.Unlock()
	c.st = teHead
}

// Read returns the response bytes, with refused heads rewritten.
func (c *teConn) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.st == tePass && len(c.head) == 0 {
			return c.Conn.Read(p)
		}
		if c.buf == nil {
			c.buf = make([]byte, 32<<10)
		}
		n, err := c.Conn.Read(c.buf)
		if n > 0 {
			c.feed(c.buf[:n])
		}
		if err != nil {
			if len(c.out) == 0 {
				c.out, c.head = append(c.out, c.head...), nil // an unfinished head goes to Go as it is
			}
			if len(c.out) == 0 {
				return 0, err
			}
			break
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// feed runs the framing over data, appending what Go should read to out.
func (c *teConn) feed(data []byte) {
	for len(data) > 0 {
		switch c.st {
		case tePass:
			c.out = append(c.out, data...)
			return
		case teFixed:
			n := min(int64(len(data)), c.left)
			c.out = append(c.out, data[:n]...)
			data, c.left = data[n:], c.left-n
			if c.left == 0 {
				c.responseDone()
			}
		case teChunked:
			n, done, rej := c.chunk.Check(data)
			c.out = append(c.out, data[:n]...)
			data = data[n:]
			if rej != nil {
				c.stepAside(data)
				return
			}
			if done {
				c.responseDone()
			}
		case teHead:
			from := max(len(c.head)-3, 0)
			c.head = append(c.head, data...)
			if n := min(len(c.head), len(httpVersion)); !bytes.Equal(c.head[:n], httpVersion[:n]) {
				// Not a response head (an origin that sent more body than it announced): Go must
				// see these bytes as they are, and drop the connection as it does.
				c.stepAside(nil)
				return
			}
			end := h1.HeadEnd(c.head, from)
			if end < 0 {
				if len(c.head) > maxHead {
					c.stepAside(nil)
				}
				return
			}
			rest := append([]byte(nil), c.head[end:]...)
			c.out = append(c.out, c.startBody(c.head[:end])...)
			c.head, data = nil, rest
		}
	}
}

// stepAside passes the gathered head and data unchanged from now on.
func (c *teConn) stepAside(data []byte) {
	c.out = append(append(c.out, c.head...), data...)
	c.head, c.st = nil, tePass
}

// startBody reads a whole response head, sets the body's framing and returns the head Go reads.
func (c *teConn) startBody(head []byte) []byte {
	status, te, cl, ok := headFraming(head)
	if !ok {
		c.st = tePass
		return head
	}
	if status >= 100 && status < 200 {
		c.st = teHead // an interim response: the final one follows
		return head
	}
	c.mu.Lock()
	method := "?"
	if len(c.methods) > 0 {
		method, c.methods = c.methods[0], c.methods[1:]
	}
	c.mu.Unlock()
	switch {
	case method == "HEAD" || status == 204 || status == 304:
		c.responseDone()
		return head
	case te == nil:
		if cl < 0 {
			c.st = tePass // until close
		} else if c.st, c.left = teFixed, cl; cl == 0 {
			c.responseDone()
		}
		return head
	case len(te) == 1 && te[0] == "chunked":
		c.st, c.chunk = teChunked, h1.Chunked{}
		return head
	}
	// Go's client would refuse this head: rewrite it.
	codings := te
	chunked := codings[len(codings)-1] == "chunked"
	if chunked {
		codings = codings[:len(codings)-1]
		c.st, c.chunk = teChunked, h1.Chunked{}
	} else {
		c.st = tePass
	}
	return rewriteTE(head, codings, chunked)
}

// headFraming reads the status, the transfer codings (nil without Transfer-Encoding) and the
// Content-Length (-1 when absent) of a response head; ok is false when it is not plain enough to
// follow (then Go reads it as it is).
func headFraming(head []byte) (status int, te []string, cl int64, ok bool) {
	lines := strings.Split(strings.TrimRight(string(head), "\r\n"), "\r\n")
	parts := strings.SplitN(lines[0], " ", 3)
	if len(parts) < 2 || !strings.HasPrefix(parts[0], "HTTP/1.") {
		return 0, nil, 0, false
	}
	status, err := strconv.Atoi(parts[1])
	if err != nil || len(parts[1]) != 3 {
		return 0, nil, 0, false
	}
	cl = -1
	for _, l := range lines[1:] {
		name, value, found := strings.Cut(l, ":")
		if !found || strings.ContainsAny(l, "\n") {
			return 0, nil, 0, false
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "transfer-encoding":
			for _, t := range strings.Split(value, ",") {
				if t = strings.ToLower(strings.TrimSpace(t)); t != "" {
					te = append(te, t)
				}
			}
		case "content-length":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || (cl >= 0 && cl != n) {
				return 0, nil, 0, false // Go refuses it with a 502; nothing to follow
			}
			cl = n
		}
	}
	if te != nil && len(te) == 0 {
		te = nil
	}
	return status, te, cl, true
}

// rewriteTE drops the Transfer-Encoding and Content-Length lines of head, adds back
// "Transfer-Encoding: chunked" when chunked, and names the other codings for UndoCodings.
func rewriteTE(head []byte, codings []string, chunked bool) []byte {
	lines := strings.Split(strings.TrimRight(string(head), "\r\n"), "\r\n")
	var b strings.Builder
	b.WriteString(lines[0] + "\r\n")
	for _, l := range lines[1:] {
		name, _, _ := strings.Cut(l, ":")
		if n := strings.ToLower(name); n == "transfer-encoding" || n == "content-length" || n == strings.ToLower(teCodingsHeader) {
			continue
		}
		b.WriteString(l + "\r\n")
	}
	if chunked {
		b.WriteString("Transfer-Encoding: chunked\r\n")
	} else {
		b.WriteString("Connection: close\r\n")
	}
	if len(codings) > 0 {
		b.WriteString(teCodingsHeader + ": " + strings.Join(codings, ", ") + "\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// teDialers returns the transport's dial functions with teConn under plain connections and under
// TLS (Go then speaks HTTP/1.1 over it, as it already did with a custom dialer).
func teDialers(d *net.Dialer, trust Trust) (plain, withTLS func(ctx context.Context, network, addr string) (net.Conn, error)) {
	plain = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &teConn{Conn: c}, nil
	}
	withTLS = func(ctx context.Context, network, addr string) (net.Conn, error) {
		// RootCAs nil: the system's roots; the server name is addr's host (tls.Dialer).
		peer := trust[addr]
		tc := &tls.Config{NextProtos: []string{"http/1.1"}, RootCAs: peer.Roots}
		if peer.Cert != nil {
			tc.Certificates = []tls.Certificate{*peer.Cert}
		}
		td := &tls.Dialer{NetDialer: d, Config: tc}
		c, err := td.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &teConn{Conn: c}, nil
	}
	return plain, withTLS
}
