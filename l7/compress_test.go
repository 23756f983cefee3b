package l7

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// compressOrigin serves the shapes compression must tell apart.
func compressOrigin(t *testing.T, body []byte) *backend {
	return startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("ETag", `"v1"`)
		switch r.URL.Path {
		case "/small":
			io.WriteString(w, `{"ok": true}`)
			return
		case "/png":
			h.Set("Content-Type", "image/png")
		case "/encoded":
			h.Set("Content-Encoding", "gzip")
		case "/no-transform":
			h.Set("Cache-Control", "public, no-transform")
		case "/vary":
			h.Set("Vary", "Origin")
		case "/chunked":
			h.Set("Trailer", "X-Sum")
			w.Write(body[:len(body)/2])
			w.(http.Flusher).Flush()
			w.Write(body[len(body)/2:])
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond) // the last chunk and trailers alone, in a read of their own
			h.Set("X-Sum", "ok")
			return
		}
		h.Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body)
	}))
}

// decoded decompresses body as coding says.
func decoded(t *testing.T, coding string, body []byte) []byte {
	t.Helper()
	var r io.Reader
	var err error
	switch coding {
	case "gzip":
		r, err = gzip.NewReader(bytes.NewReader(body))
	case "br":
		r = brotli.NewReader(bytes.NewReader(body))
	case "zstd":
		r, err = zstd.NewReader(bytes.NewReader(body))
	case "":
		return body
	default:
		t.Fatalf("unexpected Content-Encoding %q", coding)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decode %s: %v", coding, err)
	}
	return out
}

// TestCompressEveryClientAndEngine: a route with compress answers each client in the coding it
// ranks highest (gzip, br, zstd; identity without Accept-Encoding), on every engine and over
// HTTP/2, from HTTP/1.1 and h2c pools: the body decodes to the backend's, Content-Length is
// gone, Vary names Accept-Encoding once, the ETag turns weak and trailers still arrive. What
// must not be compressed is not: small bodies, images, bodies the backend encoded, no-transform
// and HEAD.
func TestCompressEveryClientAndEngine(t *testing.T) {
	body := bytes.Repeat([]byte(`{"id": 12345, "name": "switchyard", "tags": ["edge", "l7"]}, `), 350) // ~20 KB
	o := compressOrigin(t, body)
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		for _, pool := range []string{"http1", "h2c"} {
			p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, compress: {}}]
pools: [{name: p, protocol: %s, backends: [{address: %q}]}]
`, pool, e.backend(o.addr)))
			checkCompression(t, p, pool, body)
		}
	})
	// net/http's path (a sticky pool) compresses by the same rule.
	p := engine{name: "goroutines", noLoops: true}.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, compress: {}}]
pools: [{name: p, sticky: {cookie: s}, backends: [{address: %q}]}]
`, o.addr))
	p.viaNetHTTP = true
	checkCompression(t, p, "sticky", body)
}

// checkCompression asks p for each shape of compressOrigin in each coding.
func checkCompression(t *testing.T, p *engineProxy, pool string, body []byte) {
	t.Helper()
	tr := &http.Transport{DisableCompression: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // test certificate
	client := &http.Client{Timeout: 10 * time.Second, Transport: tr}
	if p.h2 {
		client = h2Client(p.base())
		client.Transport.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	}
	get := func(method, path, accept string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, p.base()+path, nil)
		if accept != "" {
			req.Header.Set("Accept-Encoding", accept)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("pool %s: %s %s: %v", pool, method, path, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("pool %s: %s %s: %s, %v", pool, method, path, resp.Status, err)
		}
		return resp, got
	}
	for accept, want := range map[string]string{"gzip": "gzip", "gzip, deflate, br": "br", "br;q=0.5, zstd": "zstd", "": "", "identity": "", "gzip;q=0": ""} {
		for _, path := range []string{"/json", "/chunked"} {
			resp, got := get("GET", path, accept)
			ce := resp.Header.Get("Content-Encoding")
			if ce != want {
				t.Errorf("pool %s: %s with Accept-Encoding %q: Content-Encoding %q, want %q", pool, path, accept, ce, want)
			}
			if !bytes.Equal(decoded(t, ce, got), body) {
				t.Errorf("pool %s: %s %q: the body does not decode to the backend's", pool, path, accept)
			}
			if want == "" {
				continue
			}
			if resp.ContentLength != -1 || resp.Header.Get("Content-Length") != "" {
				t.Errorf("pool %s: %s %q: a compressed body with Content-Length %d", pool, path, accept, resp.ContentLength)
			}
			if v := resp.Header.Values("Vary"); strings.Join(v, ",") != "Accept-Encoding" {
				t.Errorf("pool %s: %s %q: Vary %q, want Accept-Encoding", pool, path, accept, v)
			}
			if et := resp.Header.Get("ETag"); et != `W/"v1"` {
				t.Errorf("pool %s: %s %q: ETag %q, want the weak W/\"v1\"", pool, path, accept, et)
			}
			if path == "/chunked" && pool != "sticky" && resp.Trailer.Get("X-Sum") != "ok" {
				t.Errorf("pool %s: %s %q: trailer X-Sum %q, want ok", pool, path, accept, resp.Trailer.Get("X-Sum"))
			}
		}
	}
	resp, _ := get("GET", "/vary", "gzip")
	if v := strings.Join(resp.Header.Values("Vary"), ","); v != "Origin,Accept-Encoding" {
		t.Errorf("pool %s: Vary %q, want the backend's Origin and Accept-Encoding", pool, v)
	}
	for _, path := range []string{"/small", "/png", "/encoded", "/no-transform"} {
		resp, got := get("GET", path, "gzip, br, zstd")
		if ce := resp.Header.Get("Content-Encoding"); (path == "/encoded") != (ce == "gzip") || path != "/encoded" && ce != "" {
			t.Errorf("pool %s: %s: Content-Encoding %q: compressed by the proxy", pool, path, ce)
		}
		if path != "/small" && path != "/encoded" && !bytes.Equal(got, body) {
			t.Errorf("pool %s: %s: body changed", pool, path)
		}
		if resp.Header.Get("ETag") != `"v1"` {
			t.Errorf("pool %s: %s: ETag %q changed", pool, path, resp.Header.Get("ETag"))
		}
	}
	if resp, _ := get("HEAD", "/json", "gzip"); resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("pool %s: HEAD answered with Content-Encoding %q", pool, resp.Header.Get("Content-Encoding"))
	}
}

// TestCompressStreams: a compressed response goes out as the backend sends it: the first part
// reaches the client, decodable, while the backend still holds the rest.
func TestCompressStreams(t *testing.T) {
	release := make(chan struct{})
	o := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, strings.Repeat("first part ", 100))
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "the rest")
	}))
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, compress: {encodings: [gzip]}}]
pools: [{name: p, backends: [{address: %q}]}]
`, e.backend(o.addr)))
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true,
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test certificate
		if e.h2 {
			client = h2Client(p.base())
		}
		req, _ := http.NewRequest("GET", p.base()+"/", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatalf("no gzip header before the backend finished: %v", err)
		}
		first := make([]byte, 11*100)
		if _, err := io.ReadFull(zr, first); err != nil || !strings.HasPrefix(string(first), "first part") {
			t.Fatalf("first part %q, %v", first, err)
		}
		release <- struct{}{}
		rest, err := io.ReadAll(zr)
		if err != nil || string(rest) != "the rest" {
			t.Fatalf("rest %q, %v", rest, err)
		}
	})
}

// TestCompressSizedInParts: a sized body that arrives in parts (the head waits for the
// encoder's first output, sendStart) reaches the client whole, small or past the encoder's
// blocks; one the backend cuts short never reads as complete.
func TestCompressSizedInParts(t *testing.T) {
	part := bytes.Repeat([]byte(`{"id": 12345, "name": "switchyard", "tags": ["edge", "l7"]}, `), 1200) // ~70 KB
	o := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts, part := 3, part
		if r.URL.Path == "/small" {
			parts, part = 2, part[:2000]
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(parts*len(part)))
		if r.URL.Path == "/cut" {
			w.Write(part)
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler) // cut: the connection (HTTP/1.1) or the stream (h2c) ends
		}
		for range parts {
			w.Write(part)
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}))
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		for _, pool := range []string{"http1", "h2c"} {
			testSizedInParts(t, e, pool, o, part)
		}
	})
}

// testSizedInParts asks for TestCompressSizedInParts' bodies through e with a pool of protocol.
func testSizedInParts(t *testing.T, e engine, protocol string, o *backend, part []byte) {
	t.Helper()
	p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, compress: {encodings: [gzip]}}]
pools: [{name: p, protocol: %s, backends: [{address: %q}]}]
`, protocol, e.backend(o.addr)))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test certificate
	if e.h2 {
		client = h2Client(p.base())
	}
	get := func(path string) ([]byte, error) {
		req, _ := http.NewRequest("GET", p.base()+path, nil)
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if ce := resp.Header.Get("Content-Encoding"); ce != "gzip" {
			t.Fatalf("pool %s: %s: Content-Encoding %q, want gzip", protocol, path, ce)
		}
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(zr)
	}
	small := bytes.Repeat(part[:2000], 2)
	for path, want := range map[string][]byte{"/small": small, "/large": bytes.Repeat(part, 3), "/small?again": small} {
		got, err := get(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("pool %s: %s: %d bytes, %v; want the backend's %d", protocol, path, len(got), err, len(want))
		}
	}
	if got, err := get("/cut"); err == nil {
		t.Errorf("pool %s: /cut: read %d bytes as a complete body; the backend sent a third of it", protocol, len(got))
	}
}

// TestCompressWithCurl: curl --compressed (a real client with its own decoders) gets the body.
func TestCompressWithCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	body := bytes.Repeat([]byte(`{"id": 12345, "name": "switchyard"}, `), 600)
	o := compressOrigin(t, body)
	p := engine{name: "loops"}.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, compress: {}}]
pools: [{name: p, backends: [{address: %q}]}]
`, o.addr))
	for _, enc := range []string{"gzip", "br", "zstd"} {
		out, err := exec.Command("curl", "-sS", "--compressed", "-H", "Accept-Encoding: "+enc, "-D", "/dev/stderr", p.base()+"/json").Output()
		if err != nil || !bytes.Equal(out, body) {
			t.Errorf("curl --compressed (%s): %d bytes, %v; want the %d-byte body", enc, len(out), err, len(body))
		}
	}
}

// Bad compress blocks are refused naming the field and the fix.
func TestCompressConfigErrors(t *testing.T) {
	for rule, want := range map[string]string{
		`{encodings: [deflate]}`:             `routes[0].compress.encodings[0]: unknown encoding "deflate"; use zstd, br or gzip`,
		`{encodings: [identity]}`:            `unknown encoding "identity"`,
		`{types: [image/png]}`:               `routes[0].compress.types[0]: "image/png" is an already compressed type`,
		`{types: ["video/*"]}`:               `"video/*" is an already compressed type`,
		`{types: [json]}`:                    `"json" is not a media type`,
		`{min_size: -1}`:                     `routes[0].compress.min_size: is negative`,
		`{levels: {gzip: 10}}`:               `routes[0].compress.levels: gzip level 10 is out of range`,
		`{types: ["text/*", image/svg+xml]}`: ``,
	} {
		_, err := ParseConfig([]byte(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, compress: ` + rule + `}]
pools: [{name: p, backends: [{address: "127.0.0.1:1"}]}]
`))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", rule, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want %q", rule, err, want)
		}
	}
}
