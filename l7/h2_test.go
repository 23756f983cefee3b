package l7

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// h2Client is an HTTP/2 client for the proxy at base: h2c with prior knowledge for http://,
// TLS with ALPN h2 for https://.
func h2Client(base string) *http.Client {
	tr := &http2.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // test certificate
	if strings.HasPrefix(base, "http://") {
		tr.AllowHTTP = true
		tr.DialTLSContext = func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}
	}
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// h2Engines are the two ways HTTP/2 reaches the h2 engine: h2c on a plain listener (through
// the event loops' hand-over) and ALPN h2 on a TLS listener.
var h2Engines = []engine{{name: "h2c", h2: true}, {name: "h2tls", h2: true, tls: true}}

func TestH2EngineServesThroughTheCore(t *testing.T) {
	for _, e := range h2Engines {
		t.Run(e.name, func(t *testing.T) {
			b := startBackend(t, "b1", nil)
			p := e.start(t, oneRoute("", b.addr))
			base := "http://" + p.addr
			if e.tls {
				base = "https://" + p.addr
			}
			c := h2Client(base)
			before := p.s.served.core()
			var wg sync.WaitGroup
			errs := make(chan error, 200)
			for i := range 200 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var body io.Reader
					method := "GET"
					if i%3 == 0 {
						method, body = "POST", bytes.NewReader(bytes.Repeat([]byte("x"), i*100))
					}
					req, _ := http.NewRequest(method, fmt.Sprintf("%s/p/%d", base, i), body)
					resp, err := c.Do(req)
					if err != nil {
						errs <- err
						return
					}
					got, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					n := 0
					if i%3 == 0 {
						n = i * 100
					}
					want := fmt.Sprintf("b1 %s /p/%d body=%d", method, i, n)
					if resp.StatusCode != 200 || string(got) != want || resp.ProtoMajor != 2 {
						errs <- fmt.Errorf("request %d: %s %d %q, want %q", i, resp.Proto, resp.StatusCode, got, want)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if n := p.s.served.core() - before; n != 200 {
				t.Errorf("the request core served %d of 200 HTTP/2 requests", n)
			}
		})
	}
}

// dialH2 opens one HTTP/2 connection to the proxy (h2c, or TLS with ALPN h2) and returns the
// test's end of a pipe: each HTTP/1.1 request written to it is sent as a stream on that
// connection, and its response written back as HTTP/1.1, so the raw-connection rule tests run
// unchanged against the h2 engine.
func (p *engineProxy) dialH2(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	cc, scheme := dialH2Conn(t, p)
	mine, theirs := net.Pipe()
	t.Cleanup(func() { mine.Close(); theirs.Close() })
	go func() {
		defer theirs.Close()
		br := bufio.NewReader(theirs)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			req.URL.Scheme, req.URL.Host, req.RequestURI = scheme, req.Host, ""
			resp, err := cc.RoundTrip(req)
			if err != nil {
				return
			}
			resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
			if err := resp.Write(theirs); err != nil {
				return
			}
		}
	}()
	mine.SetDeadline(time.Now().Add(20 * time.Second))
	return mine, bufio.NewReader(mine)
}

// Large bodies both ways, with and without content-length, well past every flow-control
// window (256 KiB per stream, 1 MiB per connection on the proxy; the client's own), on
// several streams of one connection at once.
func TestH2LargeBodiesBothWays(t *testing.T) {
	b := startBackend(t, "big", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		size, _ := strconv.Atoi(r.URL.Query().Get("size"))
		w.Header().Set("X-Got", fmt.Sprintf("%d %x", n, h.Sum(nil)))
		if r.URL.Query().Get("cl") == "1" {
			w.Header().Set("Content-Length", strconv.Itoa(size))
		}
		chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
		for size > 0 {
			k := min(size, len(chunk))
			w.Write(chunk[:k])
			size -= k
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
	}))
	for _, e := range h2Engines {
		t.Run(e.name, func(t *testing.T) {
			p := e.start(t, oneRoute("", b.addr))
			base := "http://" + p.addr
			if e.tls {
				base = "https://" + p.addr
			}
			c := h2Client(base)
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					up := bytes.Repeat([]byte{byte('a' + i)}, 3<<20+i)
					var body io.Reader = bytes.NewReader(up)
					if i%2 == 1 {
						body = io.MultiReader(body) // no length: chunked upstream
					}
					down := 5<<20 + i
					url := fmt.Sprintf("%s/big?size=%d&cl=%d", base, down, i/2)
					resp, err := c.Post(url, "application/octet-stream", body)
					if err != nil {
						t.Errorf("stream %d: %v", i, err)
						return
					}
					got, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					sum := sha256.Sum256(up)
					if want := fmt.Sprintf("%d %x", len(up), sum); resp.Header.Get("X-Got") != want {
						t.Errorf("stream %d: backend got %q, want %q", i, resp.Header.Get("X-Got"), want)
					}
					if err != nil || len(got) != down || !bytes.Equal(got[:64], bytes.Repeat([]byte("0123456789abcdef"), 4)) {
						t.Errorf("stream %d: response %d bytes (err %v), want %d", i, len(got), err, down)
					}
				}()
			}
			wg.Wait()
		})
	}
}

// h2load (Debian's nghttp2-client), the benchmark's client: many streams on many connections,
// every one answered 2xx by the h2 engine.
func TestH2WithH2load(t *testing.T) {
	bin, err := exec.LookPath("h2load")
	if err != nil {
		t.Skip("h2load not installed (apt-get install nghttp2-client)")
	}
	b := startBackend(t, "b", nil)
	p := h2Proxy(t, oneRoute("", b.addr))
	out, err := exec.Command(bin, "-n", "4000", "-c", "8", "-m", "20", "http://"+p.addr+"/load").CombinedOutput()
	if err != nil {
		t.Fatalf("h2load: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "4000 succeeded, 0 failed, 0 errored, 0 timeout") ||
		!strings.Contains(string(out), "status codes: 4000 2xx") || !strings.Contains(string(out), "Application protocol: h2c") {
		t.Fatalf("h2load did not get 4000 2xx answers over h2c:\n%s", out)
	}
	if n := p.s.served.core(); n != 4000 {
		t.Errorf("the request core served %d of 4000", n)
	}
}

// What the core does not serve goes to the net/http handler on the stream: no route (404),
// and a sticky pool (cookies), with the request body.
func TestH2FallbackToNetHTTP(t *testing.T) {
	b := startBackend(t, "st", nil)
	p := h2Proxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, match: {path: {prefix: /app}}}]
pools: [{name: p, balance: sticky, backends: [{address: %q}]}]
`, b.addr))
	c := h2Client("http://" + p.addr)
	resp, err := c.Get("http://" + p.addr + "/none")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 || resp.ProtoMajor != 2 {
		t.Errorf("no route: %s %d, want HTTP/2 404", resp.Proto, resp.StatusCode)
	}
	resp, err = c.Post("http://"+p.addr+"/app/x", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "st POST /app/x body=5" || resp.Header.Get("Set-Cookie") == "" {
		t.Errorf("sticky pool: %d %q cookie %q", resp.StatusCode, body, resp.Header.Get("Set-Cookie"))
	}
	if n := p.s.served.core(); n != 0 {
		t.Errorf("the core counted %d requests that net/http served", n)
	}
}
