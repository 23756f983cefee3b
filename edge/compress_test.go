package edge

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/switchyard/switchyard/internal/compress"
)

// unzip decodes body as coding says ("" is identity).
func unzip(t *testing.T, coding, body string) string {
	t.Helper()
	var r io.Reader
	var err error
	switch coding {
	case "":
		return body
	case "gzip":
		r, err = gzip.NewReader(strings.NewReader(body))
	case "br":
		r = brotli.NewReader(strings.NewReader(body))
	case "zstd":
		r, err = zstd.NewReader(strings.NewReader(body))
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
	return string(out)
}

// TestCompressStoredOnce: with compress on, the origin is asked for identity once; gzip, br,
// zstd and identity clients each get the coding they ask for, each a HIT after the first, the
// coding made once from the stored identity (compressed_total counts 3), its bytes decoding to
// the origin's; a coded hit is served by the fast path; the head says Content-Encoding, Vary:
// Accept-Encoding and a weak ETag; a purge of the URL removes every coding; ranges, images and
// small bodies are never compressed.
func TestCompressStoredOnce(t *testing.T) {
	body := strings.Repeat(`{"id": 12345, "name": "switchyard", "tags": ["edge"]}, `, 400)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if ae := r.Header.Get("Accept-Encoding"); ae != "identity" {
			t.Errorf("the origin was asked for Accept-Encoding %q, want identity", ae)
		}
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/png":
			w.Header().Set("Content-Type", "image/png")
		case "/small":
			io.WriteString(w, "{}")
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
	})
	e := newEdge(t, o.URL, func(c *Config) { c.Compress = &compress.Rule{} })
	url := e.URL() + "/data.json"
	want := map[string]string{"gzip": "gzip", "br": "br", "zstd": "zstd", "identity": ""}
	for round := 0; round < 3; round++ {
		for _, accept := range []string{"identity", "gzip", "br", "zstd"} {
			r := get(t, url, "Accept-Encoding", accept)
			ce := r.h.Get("Content-Encoding")
			label := "HIT"
			if round == 0 && accept == "identity" {
				label = "MISS"
			}
			if r.status != 200 || r.cache() != label || ce != want[accept] {
				t.Fatalf("round %d, %s: %d %s Content-Encoding %q; want 200 %s %q", round, accept, r.status, r.cache(), ce, label, want[accept])
			}
			if unzip(t, ce, r.body) != body {
				t.Fatalf("round %d, %s: the body does not decode to the origin's", round, accept)
			}
			if !strings.Contains(strings.Join(r.h.Values("Vary"), ","), "Accept-Encoding") {
				t.Errorf("round %d, %s: Vary %q without Accept-Encoding", round, accept, r.h.Values("Vary"))
			}
			if et := r.h.Get("Etag"); (ce == "") != (et == `"v1"`) || ce != "" && et != `W/"v1"` {
				t.Errorf("round %d, %s: ETag %q", round, accept, et)
			}
		}
	}
	if n := o.hits("/data.json"); n != 1 {
		t.Errorf("origin asked %d times, want once", n)
	}
	if n := e.stats.Compressed.Load(); n != 3 {
		t.Errorf("compressed %d times, want 3 (each coding once)", n)
	}
	if e.stats.FastPath.Load() == 0 {
		t.Error("no hit took the fast path")
	}
	// A range is of the identity representation.
	if r := get(t, url, "Accept-Encoding", "gzip", "Range", "bytes=0-9"); r.status != 206 || r.h.Get("Content-Encoding") != "" || r.body != body[:10] {
		t.Errorf("range: %d %q %q", r.status, r.h.Get("Content-Encoding"), r.body)
	}
	for _, path := range []string{"/png", "/small"} {
		get(t, e.URL()+path, "Accept-Encoding", "identity")
		if r := get(t, e.URL()+path, "Accept-Encoding", "gzip, br, zstd"); r.h.Get("Content-Encoding") != "" {
			t.Errorf("%s compressed (%s)", path, r.h.Get("Content-Encoding"))
		}
	}
	if _, err := e.Purge(PurgeRequest{URLs: []string{url}}); err != nil {
		t.Fatal(err)
	}
	if r := get(t, url, "Accept-Encoding", "gzip"); r.cache() != "MISS" {
		t.Errorf("after a purge of the URL, gzip: %s, want MISS (every coding purged)", r.cache())
	}
	// curl decodes every coding with its own decoders.
	if _, err := exec.LookPath("curl"); err == nil {
		for _, enc := range []string{"gzip", "br", "zstd"} {
			out, err := exec.Command("curl", "-sS", "--compressed", "-H", "Accept-Encoding: "+enc, url).Output()
			if err != nil || !bytes.Equal(out, []byte(body)) {
				t.Errorf("curl --compressed (%s): %d bytes, %v", enc, len(out), err)
			}
		}
	}
}

// A bad compress block is refused naming the field.
func TestCompressConfigError(t *testing.T) {
	_, err := New(Config{Listen: "127.0.0.1:0", Origin: "http://127.0.0.1:1", Compress: &compress.Rule{Types: []string{"image/png"}}})
	if err == nil || !strings.Contains(err.Error(), "compress.types[0]") || !strings.Contains(err.Error(), "already compressed") {
		t.Fatalf("error %v", err)
	}
}
