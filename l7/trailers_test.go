package l7

import (
	"crypto/tls"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/h1/h1test"
)

// An HTTP/1.1 backend's chunked trailers reach every client that can carry them, HTTP/1.1
// (chunked) and HTTP/2 (a trailer HEADERS frame), on every engine; fields that must not travel
// in a trailer (framing, routing, authentication: RFC 9110 6.5.1) are dropped, and a malformed
// trailer section is refused like a malformed head.
func TestTrailersReachEveryClient(t *testing.T) {
	o := h1test.StartLenientOrigin(t, func(target string) string {
		h := "HTTP/1.1 200 OK\r\nTrailer: X-Checksum, Grpc-Status\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n"
		if target == "/bad" {
			return h + "X-Checksum: 1\r\n: no-name\r\n\r\n"
		}
		return h + "X-Checksum: sha1-abc\r\nContent-Length: 99\r\nGrpc-Status: 0\r\nSet-Cookie: a=b\r\n\r\n"
	})
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		p := e.start(t, oneRoute("", e.backend(o.Addr)))
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test certificate
		if e.h2 {
			client = h2Client(p.base())
		}
		resp, err := client.Get(p.base() + "/good")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(body) != "abc" {
			t.Fatalf("body %q, %v", body, err)
		}
		if got := resp.Trailer.Get("X-Checksum"); got != "sha1-abc" {
			t.Errorf("trailer X-Checksum = %q, want sha1-abc (trailers %v)", got, resp.Trailer)
		}
		if got := resp.Trailer.Get("Grpc-Status"); got != "0" {
			t.Errorf("trailer Grpc-Status = %q, want 0 (trailers %v)", got, resp.Trailer)
		}
		for _, name := range []string{"Content-Length", "Set-Cookie"} {
			if v := resp.Trailer.Get(name); v != "" {
				t.Errorf("forbidden trailer %s forwarded: %q", name, v)
			}
		}

		// A malformed trailer section breaks the response (an error, or a body without its
		// trailers), never reaches the client as fields.
		resp, err = client.Get(p.base() + "/bad")
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.Trailer.Get("X-Checksum") != "" {
				t.Errorf("a malformed trailer section passed: body %q, trailers %v", body, resp.Trailer)
			}
		}
	})
}
