package l7

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// backend is a real HTTP server on loopback that names itself in X-Backend and counts requests.
type backend struct {
	name  string
	addr  string
	hits  atomic.Int64
	srv   *http.Server
	delay atomic.Int64 // nanoseconds to sleep per request
	code  atomic.Int64 // status to answer with (0 = 200)
}

func startBackend(t *testing.T, name string, h http.Handler) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, addr: ln.Addr().String()}
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				w.WriteHeader(http.StatusOK)
				return
			}
			b.hits.Add(1)
			if d := b.delay.Load(); d > 0 {
				select {
				case <-time.After(time.Duration(d)):
				case <-r.Context().Done():
				}
			}
			w.Header().Set("X-Backend", name)
			w.Header().Set("X-Seen-Path", r.URL.Path)
			for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "Forwarded", "Via", "Connection", "Keep-Alive", "X-Hop"} {
				w.Header().Set("X-Seen-"+k, strings.Join(r.Header.Values(k), "|"))
			}
			if c := b.code.Load(); c != 0 {
				w.WriteHeader(int(c))
			}
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s body=%d", name, r.Method, r.URL.Path, len(body))
		})
	}
	b.srv = &http.Server{Handler: h, Protocols: new(http.Protocols)}
	b.srv.Protocols.SetHTTP1(true)
	b.srv.Protocols.SetUnencryptedHTTP2(true)
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

// proxyOptions are added to every startProxy server; bothPaths switches it.
var proxyOptions []Option

// bothPaths runs a fast-path test on the event loops and on a goroutine per connection (the
// path TLS connections and handed-over uploads take).
func bothPaths(t *testing.T, test func(t *testing.T)) {
	t.Run("loops", test)
	proxyOptions = []Option{WithoutEventLoops()}
	defer func() { proxyOptions = nil }()
	t.Run("goroutines", test)
}

// startProxy parses the YAML config (with %s placeholders already filled) and serves it on a
// loopback port, returning the base URL.
func startProxy(t *testing.T, yamlText string) (*Server, string) {
	t.Helper()
	cfg, err := ParseConfig([]byte(yamlText))
	if err != nil {
		t.Fatalf("parse config: %v\n%s", err, yamlText)
	}
	s, err := NewServer(cfg, append([]Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, proxyOptions...)...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, "http://" + ln.Addr().String()
}

func get(t *testing.T, c *http.Client, method, url string, body io.Reader, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// rawExchange writes raw bytes to the proxy and returns the first response's status line.
func rawExchange(t *testing.T, base, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _ := io.ReadAtLeast(c, buf, 12)
	line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
	return line
}
