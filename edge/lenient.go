package edge

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Unknown transfer codings. Go's client accepts only "chunked" as a Transfer-Encoding and fails
// any other response outright, so an origin that sends, say, "Transfer-Encoding: gzip" (or a
// coding nobody knows) would make the edge answer 502 where another cache stores the response.
// Transfer codings are hop-by-hop (RFC 9112 6.1): the edge removes them before storing or
// forwarding. For a GET or HEAD whose response Go refused for that reason alone, the edge fetches
// once more on a connection of its own, reads the head itself, decodes what it can (chunked,
// gzip, x-gzip, deflate), treats a coding it does not know as the identity, and when chunked is
// not the final coding reads the body until the origin closes (RFC 9112 6.3).

// errUnknownTE reports whether err is Go's client refusing a transfer coding.
func errUnknownTE(err error) bool {
	return err != nil && strings.Contains(err.Error(), "unsupported transfer encoding")
}

// fetchUpstream sends req upstream; a GET or HEAD refused for its transfer coding is fetched
// again leniently from the origin.
func (e *Edge) fetchUpstream(req *http.Request) (*http.Response, error) {
	resp, err := e.upstream.do(req)
	if !errUnknownTE(err) || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		return resp, err
	}
	e.log.Info("origin sent a transfer coding Go's client refuses; fetching it leniently", "url", req.URL.Path, "err", err)
	return e.upstream.lenientFetch(req)
}

// lenientFetch sends req to the origin on a new connection (closed after the response) and reads
// the response with transfer codings handled as described above.
func (u *upstream) lenientFetch(req *http.Request) (*http.Response, error) {
	out := retarget(req, u.origin)
	out.Close = true
	addr := out.URL.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		port := "80"
		if out.URL.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(addr, port)
	}
	ctx := req.Context()
	d := &net.Dialer{Timeout: 5 * time.Second}
	var conn net.Conn
	var err error
	if out.URL.Scheme == "https" {
		conn, err = (&tls.Dialer{NetDialer: d, Config: &tls.Config{ServerName: out.URL.Hostname()}}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch %s leniently: %w", req.URL.Path, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	resp, err := readLenient(conn, out)
	if err != nil {
		stop()
		conn.Close()
		return nil, fmt.Errorf("fetch %s leniently: %w", req.URL.Path, err)
	}
	resp.Body = &connBody{ReadCloser: resp.Body, conn: conn, stop: stop}
	return resp, nil
}

// readLenient writes req on conn and reads its response, rewriting the transfer codings.
func readLenient(conn net.Conn, req *http.Request) (*http.Response, error) {
	if err := req.Write(conn); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	var head []byte
	for !bytes.HasSuffix(head, []byte("\r\n\r\n")) && !bytes.HasSuffix(head, []byte("\n\n")) {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		if head = append(head, line...); len(head) > fastMaxHead {
			return nil, errors.New("response head too large")
		}
	}
	head, codings := stripTransferCodings(head)
	resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(bytes.NewReader(head), br)), req)
	if err != nil {
		return nil, err
	}
	for i := len(codings) - 1; i >= 0; i-- { // the last coding applied is undone first
		switch codings[i] {
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(resp.Body)
			if err != nil {
				resp.Body.Close()
				return nil, fmt.Errorf("decode gzip transfer coding: %w", err)
			}
			resp.Body = readCloser{zr, resp.Body}
		case "deflate":
			zr, err := zlib.NewReader(resp.Body)
			if err != nil {
				resp.Body.Close()
				return nil, fmt.Errorf("decode deflate transfer coding: %w", err)
			}
			resp.Body = readCloser{zr, resp.Body}
		}
	}
	resp.ContentLength = -1
	return resp, nil
}

// stripTransferCodings removes the Transfer-Encoding lines (and any Content-Length, which a
// Transfer-Encoding overrides, RFC 9112 6.3) from a response head. When chunked is the final
// coding it puts back "Transfer-Encoding: chunked", which Go reads; the other codings, in order,
// are returned for the caller to undo.
func stripTransferCodings(head []byte) ([]byte, []string) {
	var out []byte
	var codings []string
	lines := bytes.SplitAfter(head, []byte("\n"))
	for i, line := range lines {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if i > 0 && ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Transfer-Encoding")) {
			for _, c := range strings.Split(string(value), ",") {
				if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
					codings = append(codings, c)
				}
			}
			continue
		}
		if i > 0 && ok && bytes.EqualFold(bytes.TrimSpace(name), []byte("Content-Length")) {
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 && len(codings) > 0 && codings[len(codings)-1] == "chunked" {
			out = append(out, "Transfer-Encoding: chunked\r\n"...)
			codings = codings[:len(codings)-1]
		}
		out = append(out, line...)
	}
	return out, codings
}

// connBody closes the lenient fetch's own connection with its body.
type connBody struct {
	io.ReadCloser
	conn net.Conn
	stop func() bool
}

func (b *connBody) Close() error {
	b.stop()
	err := b.ReadCloser.Close()
	b.conn.Close()
	return err
}

type readCloser struct {
	io.Reader
	io.Closer
}
