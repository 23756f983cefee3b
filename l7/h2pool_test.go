package l7

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// Every client protocol on every engine reaches an h2c pool through the request core's own
// HTTP/2 connections: a body of known length and one without (chunked from an HTTP/1.1
// client, a length-less stream from an HTTP/2 one), the backend seeing HTTP/2, and the
// response's trailers reaching the client.
func TestH2PoolFromEveryClient(t *testing.T) {
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Upstream-Proto", r.Proto)
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "echo:")
		w.Write(body)
		w.Header().Set("X-Sum", strconv.Itoa(len(body)))
	}))
	up := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		p := e.start(t, oneRoute(", protocol: h2c", e.backend(b.addr)))
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test certificate
		if e.h2 {
			client = h2Client(p.base())
		}
		for _, sized := range []bool{true, false} {
			var body io.Reader = bytes.NewReader(up)
			if !sized {
				body = io.MultiReader(body) // no length: chunked (HTTP/1.1) or a plain stream (HTTP/2)
			}
			resp, err := client.Post(p.base()+"/up", "application/octet-stream", body)
			if err != nil {
				t.Fatalf("sized %v: %v", sized, err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !bytes.Equal(got, append([]byte("echo:"), up...)) {
				t.Fatalf("sized %v: %s, %d bytes (%v), want 200 and the echo of %d", sized, resp.Status, len(got), err, len(up))
			}
			if v := resp.Header.Get("X-Upstream-Proto"); v != "HTTP/2.0" {
				t.Errorf("sized %v: the backend saw %q, want HTTP/2.0", sized, v)
			}
			if v := resp.Trailer.Get("X-Sum"); v != strconv.Itoa(len(up)) {
				t.Errorf("sized %v: trailer X-Sum = %q, want %d (trailers %v)", sized, v, len(up), resp.Trailer)
			}
		}
		if n := p.s.served.of(engineNetHTTP); n != 0 {
			t.Errorf("net/http served %d requests: every one belongs to the core", n)
		}
	})
}

// An h2c pool's requests are retried on the route's retry statuses (to the other backend, with
// the failover header) and bounded by the pool's header timeout (504), through the core.
func TestH2PoolRetriesAndHeaderTimeout(t *testing.T) {
	bad := startBackend(t, "bad", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	good := startBackend(t, "good", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "good")
	}))
	slow := startBackend(t, "slow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}))
	p := engine{name: "h2c", h2: true}.start(t, `
listeners: [{address: "127.0.0.1:0"}]
routes:
  - {name: slow, match: {path: {prefix: /slow}}, pool: s}
  - {name: r, pool: p, retry: {attempts: 1, on_status: [503], failover_header: X-Failover}}
pools:
  - {name: p, protocol: h2c, balance: round_robin, backends: [{address: "`+bad.addr+`"}, {address: "`+good.addr+`"}]}
  - {name: s, protocol: h2c, timeouts: {header: 200ms}, backends: [{address: "`+slow.addr+`"}]}
`)
	c := h2Client(p.base())
	failovers := 0
	for i := range 4 {
		resp, err := c.Get(p.base() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "good" {
			t.Fatalf("request %d: %s %q, want 200 good (the 503 retried)", i, resp.Status, body)
		}
		if resp.Header.Get("X-Failover") == "1" {
			failovers++
		}
	}
	if failovers == 0 {
		t.Error("no answer carried the failover header: none was retried")
	}
	start := time.Now()
	resp, err := c.Get(p.base() + "/slow")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || time.Since(start) > 3*time.Second {
		t.Errorf("slow backend: %s after %v, want 504 after the 200ms header timeout", resp.Status, time.Since(start))
	}
	if n := p.s.served.of(engineNetHTTP); n != 0 {
		t.Errorf("net/http served %d requests: every one belongs to the core", n)
	}
}

// A client that resets its stream cancels the upstream stream at once (the backend's request
// context ends), before any response head came back.
func TestH2PoolClientResetCancelsUpstream(t *testing.T) {
	cancelled := make(chan struct{}, 1)
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(10 * time.Second):
		}
	}))
	p := engine{name: "h2c", h2: true}.start(t, oneRoute(", protocol: h2c", b.addr))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.base()+"/wait", nil)
	if _, err := h2Client(p.base()).Do(req); err == nil {
		t.Fatal("the request succeeded; want the client's own timeout")
	}
	select {
	case <-cancelled:
	case <-time.After(3 * time.Second):
		t.Fatal("the backend's request went on after the client reset its stream")
	}
}

// A streamed upload to an h2c pool is bounded by the total timeout, not the pool's header
// timeout: a backend that answers once it has the whole body is not cut while the body still
// arrives (as on HTTP/1.1 pools).
func TestH2PoolSlowUploadNotCutByHeaderTimeout(t *testing.T) {
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "%d", n)
	}))
	p := engine{name: "h2c", h2: true}.start(t, oneRoute(", protocol: h2c, timeouts: {header: 200ms}", b.addr))
	pr, pw := io.Pipe()
	go func() {
		for range 6 {
			pw.Write(bytes.Repeat([]byte("u"), 1000))
			time.Sleep(100 * time.Millisecond)
		}
		pw.Close()
	}()
	resp, err := h2Client(p.base()).Post(p.base()+"/up", "application/octet-stream", pr)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "6000" {
		t.Fatalf("slow upload: %s %q, want 200 and 6000 bytes received", resp.Status, body)
	}
}

// Request trailers travel wherever both sides carry them: from HTTP/1.1 (chunked) and HTTP/2
// (a trailer block) clients to HTTP/1.1 (chunked) and h2c backends, on every engine. And an
// HTTP/2 backend's trailers after a body of known length reach an HTTP/2 client.
func TestTrailersEveryClientToEveryPool(t *testing.T) {
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		msg := fmt.Sprintf("%d %s", n, r.Trailer.Get("X-Sum"))
		w.Header().Set("Trailer", "X-Done")
		w.Header().Set("Content-Length", strconv.Itoa(len(msg)))
		io.WriteString(w, msg)
		w.Header().Set("X-Done", "yes") // sent only by HTTP/2: HTTP/1.1 has no trailers after a length
	}))
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		for _, pool := range []string{"http1", "h2c"} {
			p := e.start(t, oneRoute(", protocol: "+pool, e.backend(b.addr)))
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test certificate
			if e.h2 {
				client = h2Client(p.base())
			}
			// No length, so the trailer can follow; an HTTP/2 client may also send trailers
			// after a content-length, announced in its Trailer field, its body still arriving
			// when the proxy reads the head.
			sizes := []int64{-1}
			if e.h2 {
				sizes = append(sizes, 6)
			}
			for _, size := range sizes {
				req, _ := http.NewRequest("POST", p.base()+"/up", nil)
				req.Trailer = http.Header{"X-Sum": nil}
				req.ContentLength = size
				data := bytes.NewReader([]byte("abcdef"))
				req.Body = io.NopCloser(readerFunc(func(b []byte) (int, error) {
					if size > 0 && data.Len() == 6 {
						time.Sleep(50 * time.Millisecond)
					}
					n, err := data.Read(b)
					if err == io.EOF {
						req.Trailer.Set("X-Sum", "6")
					}
					return n, err
				}))
				resp, err := client.Do(req)
				if err != nil {
					t.Fatalf("pool %s, length %d: %v", pool, size, err)
				}
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(got) != "6 6" {
					t.Errorf("pool %s, length %d: the backend read %q, want 6 bytes and the trailer X-Sum: 6", pool, size, got)
				}
				if want := map[bool]string{true: "yes"}[e.h2 && pool == "h2c"]; resp.Trailer.Get("X-Done") != want {
					t.Errorf("pool %s: response trailer X-Done = %q, want %q", pool, resp.Trailer.Get("X-Done"), want)
				}
			}
		}
	})
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
