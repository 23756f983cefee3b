// Command edge is the origin of the edge benchmark (bench/edge.sh): it serves the objects the three
// caches (switchyard, Varnish, nginx proxy_cache) are measured on, all cacheable for an hour, and
// counts requests so the script can check that the measured phase ran from cache. Paths under
// /miss/ (the mixed row's misses: every one a new URL) answer a 480-byte object after 1 ms, the
// latency of an origin nearby, and are counted apart. With -range-file, paths under /range/ serve
// that file (Range honoured, a strong ETag; the range row, bench/edge-range.sh), counted apart with
// the body bytes sent (/rangecount).
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18080", "address to serve on")
	rangeFile := flag.String("range-file", "", "file served under /range/ (a large sparse file)")
	flag.Parse()
	objects := map[string][]byte{
		"/small": []byte(strings.Repeat("s", 480)),     // a 480-byte tracking response (the edge-bytes experiment's body, docs/lab.md)
		"/100k":  []byte(strings.Repeat("k", 100<<10)), // a 100 KB asset
		"/json":  jsonBody(),                           // a 20 KB JSON answer, compressible (the gzip row)
	}
	modified := time.Now().Add(-24 * time.Hour).UTC().Format(http.TimeFormat)
	var requests, misses atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("/count", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, requests.Load())
	})
	mux.HandleFunc("/misscount", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, misses.Load())
	})
	mux.HandleFunc("/miss/", func(w http.ResponseWriter, r *http.Request) {
		misses.Add(1)
		time.Sleep(time.Millisecond)
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=3600")
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Last-Modified", modified)
		w.Write(objects["/small"])
	})
	if *rangeFile != "" {
		serveRangeFile(mux, *rangeFile)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		body, ok := objects[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		requests.Add(1)
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=3600")
		h.Set("Content-Type", "application/octet-stream")
		if r.URL.Path == "/json" {
			h.Set("Content-Type", "application/json")
		}
		h.Set("Last-Modified", modified)
		h.Set("Etag", fmt.Sprintf(`"%d"`, len(body)))
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*listen, mux))
}

// serveRangeFile serves path under /range/ (any name, any query: each a new object to a cache)
// with http.ServeContent, cacheable for an hour under a strong ETag, and reports on /rangecount
// the requests and body bytes sent.
func serveRangeFile(mux *http.ServeMux, path string) {
	var requests, sent atomic.Int64
	modified := time.Now().Add(-24 * time.Hour)
	mux.HandleFunc("/rangecount", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, requests.Load(), sent.Load())
	})
	mux.HandleFunc("/range/", func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Open(path)
		if err != nil {
			http.Error(w, "open range file", http.StatusInternalServerError)
			return
		}
		defer f.Close()
		requests.Add(1)
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=3600")
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Etag", `"range-object"`)
		cw := &countingWriter{ResponseWriter: w, n: &sent}
		http.ServeContent(cw, r, "", modified, f)
	})
}

// countingWriter adds the body bytes written to n.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	k, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// jsonBody is 20 KB of JSON: records alike in shape, not in values, as an API answers.
func jsonBody() []byte {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; b.Len() < 20<<10; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id":%d,"state":"at transfer hub %d","zone":"%d","step":%d,"eta":"2026-12-%02dT%02d:00:00Z"}`,
			i*7919%100003, i%17, i%91, i%5, i%28+1, i%24)
	}
	b.WriteString("]")
	return []byte(b.String())
}
