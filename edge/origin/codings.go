package origin

import (
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Unknown transfer codings. Go's client accepts only "chunked" as a Transfer-Encoding and fails
// any other response outright, so an origin that sends, say, "Transfer-Encoding: gzip" (or a
// coding nobody knows) would make the edge answer 502 where another cache stores the response.
// Transfer codings are hop-by-hop (RFC 9112 6.1): the edge removes them before storing or
// forwarding. teConn (tefix.go) rewrites such a head under Go's client; UndoCodings then decodes
// the codings it named (gzip, x-gzip, deflate) and takes a coding it does not know as the
// identity.

// UndoCodings decodes the transfer codings a transport from NewTransport set aside in resp's
// header (gzip, x-gzip, deflate; a coding it does not know is taken as the identity) and removes
// that header. Call it on every response before its header or body is used.
func UndoCodings(resp *http.Response) error {
	v := resp.Header.Get(teCodingsHeader)
	if v == "" {
		return nil
	}
	resp.Header.Del(teCodingsHeader)
	codings := strings.Split(v, ",")
	for i := len(codings) - 1; i >= 0; i-- { // the last coding applied is undone first
		var zr io.Reader
		var err error
		switch strings.TrimSpace(codings[i]) {
		case "gzip", "x-gzip":
			zr, err = gzip.NewReader(resp.Body)
		case "deflate":
			zr, err = zlib.NewReader(resp.Body)
		default:
			continue
		}
		if err != nil {
			return fmt.Errorf("decode %s transfer coding: %w", codings[i], err)
		}
		resp.Body = readCloser{zr, resp.Body}
		resp.ContentLength = -1
	}
	return nil
}

type readCloser struct {
	io.Reader
	io.Closer
}
