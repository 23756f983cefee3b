package compress

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

func TestNegotiate(t *testing.T) {
	all := []Coding{Zstd, Brotli, Gzip}
	for _, c := range []struct {
		accept  string
		offered []Coding
		want    Coding
	}{
		{"", all, Identity},
		{"gzip", all, Gzip},
		{"gzip, deflate, br, zstd", all, Zstd}, // a browser's: the server's preference decides ties
		{"gzip, deflate, br", all, Brotli},
		{"br;q=0.5, gzip;q=0.8", all, Gzip},
		{"GZIP;Q=0.9, br;q=0.1", all, Gzip},
		{"*", all, Zstd},
		{"*;q=0.5, zstd;q=0", all, Brotli},
		{"gzip;q=0", all, Identity},
		{"identity", all, Identity},
		{"x-gzip", all, Gzip},
		{"br, zstd", []Coding{Gzip}, Identity},
		{"gzip;q=bogus", all, Gzip}, // a malformed q is read leniently as 1
		{" , ;q=1, gzip ;q=0.3", all, Gzip},
	} {
		if got := Negotiate([]byte(c.accept), c.offered); got != c.want {
			t.Errorf("Negotiate(%q, %v) = %v, want %v", c.accept, c.offered, got, c.want)
		}
	}
}

func TestCompressible(t *testing.T) {
	types := []string{"text/*", "application/json"}
	for ct, want := range map[string]bool{
		"text/html; charset=utf-8": true,
		"TEXT/CSS":                 true,
		"application/json":         true,
		"application/json;x=1":     true,
		"application/jsonx":        false,
		"image/png":                false,
		"":                         false,
		"textual/plain":            false,
	} {
		if got := Compressible([]byte(ct), types); got != want {
			t.Errorf("Compressible(%q) = %v, want %v", ct, got, want)
		}
	}
}

func TestLevelsCheck(t *testing.T) {
	if err := (Levels{Gzip: 10}).Check(); err == nil || !strings.Contains(err.Error(), "1 (fastest) to 9") {
		t.Errorf("gzip 10: %v", err)
	}
	if err := (Levels{Zstd: 5}).Check(); err == nil {
		t.Error("zstd 5 accepted")
	}
	if err := (Levels{Gzip: 1, Brotli: 11, Zstd: 4}).Check(); err != nil {
		t.Error(err)
	}
}

// Every coding round-trips through its reference decoder, streamed (a Flush makes what was
// written so far decodable) and reused from the pool.
func TestEncodersRoundTrip(t *testing.T) {
	e := NewEncoders(Levels{})
	body := bytes.Repeat([]byte(`{"id": 12345, "name": "switchyard", "tags": ["a", "b"]}`), 400)
	decode := map[Coding]func(io.Reader) (io.Reader, error){
		Gzip:   func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
		Brotli: func(r io.Reader) (io.Reader, error) { return brotli.NewReader(r), nil },
		Zstd:   func(r io.Reader) (io.Reader, error) { return zstd.NewReader(r) },
	}
	for c, dec := range decode {
		for round := 0; round < 2; round++ {
			var out bytes.Buffer
			w := e.Get(c, &out)
			w.Write(body[:1000])
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			flushed := out.Len()
			w.Write(body[1000:])
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			e.Put(c, w)
			if flushed == 0 || out.Len() >= len(body)/4 {
				t.Errorf("%v: %d bytes after the flush, %d in all for %d", c, flushed, out.Len(), len(body))
			}
			r, err := dec(&out)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("%v round %d: %d bytes back, %v", c, round, len(got), err)
			}
		}
	}
}
