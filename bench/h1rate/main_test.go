package main

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/bench/loadstat"
)

// run paces 200 requests a second for 300 ms over 4 connections against h, expecting size bytes.
func run(t *testing.T, h http.HandlerFunc, size int64) *loadstat.Run {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL + "/small")
	if err != nil {
		t.Fatal(err)
	}
	o := options{rate: 200, size: size, Options: loadstat.Options{Conns: 4, Concurrency: 1,
		Duration: 300 * time.Millisecond, Requests: 1000, Timeout: 2 * time.Second}}
	r, err := load(o, u)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func body(n int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(strings.Repeat("s", n))) }
}

// Every request of a good run is counted good, at about the offered rate, on keep-alive
// connections (the body is read whole, so the next answer's head is where it should be).
func TestPacedRunIsGood(t *testing.T) {
	r := run(t, body(480), 480)
	if err := r.Verdict(); err != nil {
		t.Fatalf("verdict %v, want a good run: %s", err, r.Line())
	}
	line := r.Line()
	if !strings.Contains(line, "bad=0 errors=0 timeouts=0") || strings.Contains(line, " ok=0 ") {
		t.Fatalf("line %q: want good requests and no failures", line)
	}
}

// A server that closes each connection after a few answers with "Connection: close" (as nginx
// does after 1,000) gets new connections and a good run.
func TestConnectionCloseRedials(t *testing.T) {
	var n atomic.Int64
	r := run(t, func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1)%3 == 0 {
			w.Header().Set("Connection", "close")
		}
		_, _ = w.Write([]byte(strings.Repeat("s", 480)))
	}, 480)
	if err := r.Verdict(); err != nil || n.Load() < 12 {
		t.Fatalf("verdict %v after %d answers, want a good run over redialled connections", err, n.Load())
	}
}

// A wrong body length, a status other than 200 and a chunked answer each fail the run, named.
func TestBadAnswersFailTheRun(t *testing.T) {
	cases := map[string]struct {
		h    http.HandlerFunc
		size int64
		want string
	}{
		"wrong size": {body(100), 480, "100 body bytes, want 480"},
		"404":        {http.NotFound, -1, "HTTP/1.1 200"},
		"chunked": {func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("a"))
			w.(http.Flusher).Flush()
		}, -1, "without Content-Length"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := run(t, c.h, c.size).Verdict()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("verdict %v, want a failure naming %q", err, c.want)
			}
		})
	}
}
