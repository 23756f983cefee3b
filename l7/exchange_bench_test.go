package l7

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"
)

// The exchange's cost per keep-alive request on each engine, allocations included: a raw client
// and a raw backend that allocate nothing per request, so allocs/op is the proxy's. Run with
// `go test ./l7/ -run XXX -bench Exchange -benchmem`.

func BenchmarkExchangeLoop(b *testing.B)      { benchExchange(b, false) }
func BenchmarkExchangeGoroutine(b *testing.B) { benchExchange(b, true) }

// benchBackendPort and benchProxyPort are fixed, so that the benchmark stays off other tests' ports.
const benchBackendPort, benchProxyPort = 23301, 23302

func benchExchange(b *testing.B, noLoops bool) {
	back := benchBackend(b)
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
listeners: [{address: "127.0.0.1:%d"}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, benchProxyPort, back)))
	if err != nil {
		b.Fatal(err)
	}
	opts := []Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if noLoops {
		opts = append(opts, WithoutEventLoops())
	}
	s, err := NewServer(cfg, opts...)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(benchProxyPort))
	if err != nil {
		b.Skipf("port %d is taken: %v", benchProxyPort, err)
	}
	go s.Serve(ln)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte("GET /bench HTTP/1.1\r\nHost: a\r\n\r\n")
	buf := make([]byte, 4096)
	roundTrip := func() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if err := readWhole(c, buf); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 { // the pools warm, the metric series made
		roundTrip()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		roundTrip()
	}
}

// benchBody is the backend's response body.
const benchBody = "0123456789abcdef"

// benchBackend answers every request on a connection with the same response, allocating
// nothing per request.
func benchBackend(b *testing.B) string {
	resp := []byte("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(len(benchBody)) + "\r\n\r\n" + benchBody)
	addr, _ := rawBackendAt(b, "127.0.0.1:"+strconv.Itoa(benchBackendPort), func(c net.Conn) {
		buf := make([]byte, 4096)
		n := 0
		for {
			k, err := c.Read(buf[n:])
			if err != nil {
				return
			}
			n += k
			for {
				end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
				if end < 0 {
					break
				}
				if _, err := c.Write(resp); err != nil {
					return
				}
				n = copy(buf, buf[end+4:n])
			}
		}
	})
	return addr
}

// readWhole reads one response with a Content-Length body into buf.
func readWhole(c net.Conn, buf []byte) error {
	n := 0
	for {
		k, err := c.Read(buf[n:])
		if err != nil {
			return err
		}
		n += k
		end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
		if end < 0 {
			continue
		}
		i := bytes.Index(buf[:end], []byte("Content-Length: "))
		if i < 0 {
			return fmt.Errorf("no Content-Length in %q", buf[:end])
		}
		j := i + len("Content-Length: ")
		k = bytes.IndexByte(buf[j:end+2], '\r')
		cl, err := strconv.Atoi(string(buf[j : j+k]))
		if err != nil {
			return err
		}
		if n >= end+4+cl {
			return nil
		}
	}
}
