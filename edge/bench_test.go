package edge

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// BenchmarkHit measures the handler's cost of a cache hit, without the network.
func BenchmarkHit(b *testing.B) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		fmt.Fprint(w, strings.Repeat("s", 480))
	}))
	defer o.Close()
	e, err := New(Config{Listen: "127.0.0.1:0", Origin: o.URL})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	req := httptest.NewRequest(http.MethodGet, "/small", nil)
	e.ServeHTTP(httptest.NewRecorder(), req)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			if w.Header().Get("X-Cache") != Hit {
				b.Fatal("not a hit")
			}
		}
	})
}

// BenchmarkTLSHandshake measures full TLS 1.3 handshakes through the edge's TLS listener as
// bench/edge.sh's hs cell makes them (bench/tlsload: X25519 only, no session cache, one
// HTTP/1.1 hit per connection, close_notify), with the memory limit `edge run` applies. The
// client runs in the same process: ns/op and cpu-us/op are the client's and the edge's together.
func BenchmarkTLSHandshake(b *testing.B) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		fmt.Fprint(w, strings.Repeat("s", 480))
	}))
	defer o.Close()
	cp, kp, _ := testutil.WriteCert(b, b.TempDir(), "bench.test")
	e, err := New(Config{Listen: "127.0.0.1:0", Origin: o.URL, Memory: MemoryConfig{MaxBytes: 256 << 20},
		TLS: &TLSConfig{Listen: "127.0.0.1:0", Config: tlsconf.Config{Certificates: []tlsconf.Certificate{{Cert: cp, Key: kp}}}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Start(); err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1)) // Close puts GOGC back, this the limit
	e.ApplyMemoryLimit()
	cfg := &tls.Config{ServerName: "bench.test", InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, //nolint:gosec // a certificate made for the run
		CurvePreferences: []tls.CurveID{tls.X25519}, NextProtos: []string{"http/1.1"}}
	handshakeHit(b, e.TLSAddr(), cfg) // the object cached
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			handshakeHit(b, e.TLSAddr(), cfg)
		}
	})
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-us/op")
}

// handshakeHit makes one connection, one full handshake and one request, as tlsload does.
func handshakeHit(b *testing.B, addr string, cfg *tls.Config) {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		b.Error(err)
		return
	}
	defer c.Close()
	io.WriteString(c, "GET /small HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		b.Error(err)
		return
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK || n != 480 || c.ConnectionState().DidResume {
		b.Errorf("status %d, %d bytes, resumed %v", resp.StatusCode, n, c.ConnectionState().DidResume)
	}
}
