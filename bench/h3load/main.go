// Command h3load is an HTTP/3 load generator for the bench (bench/edge.sh's h3 rows): -c QUIC
// connections (each its own quic-go http3 client and UDP socket), -m GET requests in flight on
// each, for -d or until -n requests in all, whichever comes first. Before the window opens each
// connection makes one request (the QUIC and TLS handshake; checked, not timed). Every answer is
// checked: HTTP/3, status 200 and, with -size, exactly that many body bytes; any other answer, a
// stream or connection error or a timeout fails the run (exit 1, naming the first). It prints one
// line of key=value pairs (bench/loadstat: requests, ok, bad, errors, timeouts, rps, p50_ms,
// p99_ms, elapsed; then proto, version, cipher, group).
//
// TLS: the server's certificate is not verified (the bench makes one for the run); the client
// offers X25519 only, as bench/tlsload does, so every server does the same key exchange.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/switchyard/switchyard/bench/loadstat"
)

type options struct {
	loadstat.Options
	url  string
	size int64 // expected body length; -1: any
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "https URL to GET over HTTP/3")
	o.Register(flag.CommandLine, "QUIC connections", "requests")
	flag.Int64Var(&o.size, "size", -1, "expected body length in bytes (-1: any)")
	flag.Parse()
	if err := o.Check(); err != nil {
		fmt.Fprintln(os.Stderr, "h3load: bounded runs only:", err)
		os.Exit(2)
	}
	if !strings.HasPrefix(o.url, "https://") {
		fmt.Fprintln(os.Stderr, "h3load: -url must be https://...")
		os.Exit(2)
	}
	r, st := load(o)
	r.Exit("h3load", st.fields()...)
}

// state is what the first good answer negotiated.
type state struct {
	once                   sync.Once
	proto                  string
	version, cipher, group string
}

func (s *state) fields() []string {
	return []string{"proto=" + s.proto, "version=" + s.version, "cipher=" + s.cipher, "group=" + s.group}
}

// load runs the connections and returns the run's counts.
func load(o options) (*loadstat.Run, *state) {
	r := loadstat.NewRun(o.Options)
	st := &state{proto: "none", version: "none", cipher: "none", group: "none"}
	clients := make([]*http.Client, o.Conns)
	for i := range clients {
		tr := &http3.Transport{
			TLSClientConfig: &tls.Config{
				InsecureSkipVerify: true, //nolint:gosec // a bench against a certificate made for the run
				CurvePreferences:   []tls.CurveID{tls.X25519},
			},
			QUICConfig:         &quic.Config{MaxIdleTimeout: 30 * time.Second},
			DisableCompression: true,
		}
		defer tr.Close()
		clients[i] = &http.Client{Transport: tr}
	}
	r.Drive(len(clients), func(i int) (loadstat.Outcome, string) { return get(clients[i], o, st) })
	return r, st
}

// get makes one request and checks its answer.
func get(c *http.Client, o options, st *state) (loadstat.Outcome, string) {
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url, nil)
	if err != nil {
		return loadstat.Error, err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return loadstat.Classify(err), "request: " + err.Error()
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	switch {
	case err != nil:
		return loadstat.Classify(err), "body: " + err.Error()
	case resp.ProtoMajor != 3:
		return loadstat.Bad, "answered over " + resp.Proto
	case resp.StatusCode != http.StatusOK:
		return loadstat.Bad, fmt.Sprintf("status %d", resp.StatusCode)
	case o.size >= 0 && n != o.size:
		return loadstat.Bad, fmt.Sprintf("body of %d bytes, want %d", n, o.size)
	}
	st.once.Do(func() {
		st.proto = resp.Proto
		if resp.TLS != nil {
			st.version = strings.ReplaceAll(tls.VersionName(resp.TLS.Version), " ", "")
			st.cipher = tls.CipherSuiteName(resp.TLS.CipherSuite)
			st.group = resp.TLS.CurveID.String()
		}
	})
	return loadstat.OK, ""
}
