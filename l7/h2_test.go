package l7

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
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
var h2Engines = []engine{{name: "h2c"}, {name: "h2tls", tls: true}}

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
			before := p.s.fastServed.Load()
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
			if n := p.s.fastServed.Load() - before; n != 200 {
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
	var nc net.Conn
	var err error
	scheme := "http"
	if p.tls {
		scheme = "https"
		nc, err = tls.Dial("tcp", p.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // test certificate
	} else {
		nc, err = net.Dial("tcp", p.addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	cc, err := (&http2.Transport{}).NewClientConn(nc)
	if err != nil {
		t.Fatal(err)
	}
	mine, theirs := net.Pipe()
	t.Cleanup(func() { mine.Close(); theirs.Close(); cc.Close() })
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
