package l7

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// engine is one way the proxy serves HTTP/1.1 clients. Every rule of the request core must hold
// on each of them; forEachEngine runs a test once per engine so that a new engine (or a path
// one engine hands work to) cannot silently miss a rule.
type engine struct {
	name string
	// noLoops serves a goroutine per connection (event_loops: -1).
	noLoops bool
	// tls serves the listener with ServeTLS (HTTP/1.1 over TLS).
	tls bool
	// hostNames gives backends as localhost:PORT instead of 127.0.0.1:PORT.
	hostNames bool
	// h2: clients speak HTTP/2 (h2c on a plain listener, ALPN h2 with tls); dial then returns
	// a connection that carries each HTTP/1.1 request written to it as a stream (h2adapt).
	h2 bool
	// matrix: run by forEachEngine or forEachEngineAndH2, whose requests must be served by
	// this engine itself (checkServed).
	matrix bool
}

// engines are the serving paths: the event loops with IP backends, a goroutine per connection,
// a TLS listener (served by the loops once handshaken), a TLS listener with the loops off, and
// host-name backends (which the loops hand to the goroutine path).
var engines = []engine{
	{name: "loops"},
	{name: "goroutines", noLoops: true},
	{name: "tls", tls: true},
	{name: "tls-goroutines", tls: true, noLoops: true},
	{name: "hostname", hostNames: true},
}

// forEachEngine runs test as a subtest per engine.
func forEachEngine(t *testing.T, test func(t *testing.T, e engine)) {
	for _, e := range engines {
		e.matrix = true
		t.Run(e.name, func(t *testing.T) { test(t, e) })
	}
}

// withH2 are the engines plus the HTTP/2 front end, h2c and over TLS: the rules of the request
// core that do not depend on HTTP/1.1 client framing run on these, so the h2 engine cannot
// miss one.
var withH2 = append(append([]engine{}, engines...), engine{name: "h2c", h2: true}, engine{name: "h2tls", h2: true, tls: true})

// forEachEngineAndH2 is forEachEngine over withH2.
func forEachEngineAndH2(t *testing.T, test func(t *testing.T, e engine)) {
	for _, e := range withH2 {
		e.matrix = true
		t.Run(e.name, func(t *testing.T) { test(t, e) })
	}
}

// backend returns how a configuration names the backend at addr on this engine.
func (e engine) backend(addr string) string {
	if !e.hostNames {
		return addr
	}
	_, port, _ := net.SplitHostPort(addr)
	return "localhost:" + port
}

// engineProxy is a proxy under test on one engine.
type engineProxy struct {
	s    *Server
	addr string
	tls  bool
	h2   bool
	// viaNetHTTP: the test's requests are ones net/http serves on purpose (checkServed is off).
	viaNetHTTP bool
}

// start serves the YAML configuration (backend addresses already passed through e.backend) on a
// loopback port with this engine, with extra options.
func (e engine) start(t *testing.T, yamlText string, extra ...Option) *engineProxy {
	t.Helper()
	cfg, err := ParseConfig([]byte(yamlText))
	if err != nil {
		t.Fatalf("parse config: %v\n%s", err, yamlText)
	}
	opts := []Option{WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if e.noLoops {
		opts = append(opts, WithoutEventLoops())
	}
	s, err := NewServer(cfg, append(opts, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if e.tls {
		cp, kp, _ := testutil.WriteCert(t, t.TempDir(), "proxy.test")
		tc, err := tlsconf.Load(&tlsconf.Config{Certificates: []tlsconf.Certificate{{Cert: cp, Key: kp}}})
		if err != nil {
			t.Fatal(err)
		}
		go s.ServeTLS(ln, tc)
	} else {
		go s.Serve(ln)
	}
	p := &engineProxy{s: s, addr: ln.Addr().String(), tls: e.tls, h2: e.h2}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		if !p.viaNetHTTP {
			e.checkServed(t, s)
		}
	})
	return p
}

// serves are the engines that must serve the requests of a matrix test on engine e.
func (e engine) serves() []engineKind {
	switch {
	case !e.matrix:
		return nil
	case e.h2:
		return []engineKind{engineH2}
	case e.tls && !e.noLoops:
		// A TLS connection's first request is served on the goroutine engine, the rest on a loop.
		return []engineKind{engineGoroutine, engineLoop}
	case e.noLoops || e.hostNames:
		return []engineKind{engineGoroutine}
	}
	// The loops hand streamed uploads and HTTP/2 pools to the goroutine engine.
	return []engineKind{engineLoop, engineGoroutine}
}

// checkServed fails t when s served requests and none of them on the engines e serves: a change
// that handed an engine's requests to net/http would otherwise pass every test of the matrix.
func (e engine) checkServed(t *testing.T, s *Server) {
	if len(e.serves()) == 0 {
		return
	}
	var mine, all int64
	for k := range numEngines {
		all += s.served.of(k)
	}
	for _, k := range e.serves() {
		mine += s.served.of(k)
	}
	if all > 0 && mine == 0 {
		t.Errorf("engine %s served none of the %d requests (net/http served %d): they must not leave this engine",
			e.name, all, s.served.of(engineNetHTTP))
	}
}

// dial opens a raw HTTP/1.1 client connection (over TLS on the TLS engine) with a deadline.
func (p *engineProxy) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	if p.h2 {
		return p.dialH2(t)
	}
	var c net.Conn
	var err error
	if p.tls {
		c, err = tls.Dial("tcp", p.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) //nolint:gosec // test certificate
	} else {
		c, err = net.Dial("tcp", p.addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c, bufio.NewReader(c)
}

// oneRoute is a configuration with one route to one pool of the given backends (already passed
// through e.backend); extra is appended inside the pool's mapping.
func oneRoute(extra string, backends ...string) string {
	var list []string
	for _, b := range backends {
		list = append(list, fmt.Sprintf("{address: %q}", b))
	}
	return fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [%s]%s}]
`, strings.Join(list, ", "), extra)
}
