// Command tlsload measures full TLS handshakes per second through an HTTPS server: each of
// -c workers opens a new connection, makes a full TLS 1.3 handshake (no session cache, so
// nothing can be resumed), sends one HTTP/1.1 request with "Connection: close", reads the whole
// answer and closes, until -d has passed. bench/l7.sh runs it against every proxy's TLS listener.
//
// wrk cannot do this: with "Connection: close" it reuses its SSL object (SSL_clear keeps the
// session) and resumes, which measures resumption, not handshakes. tlsload counts the handshakes
// it made and checks every one: DidResume must be false, the version TLS 1.3, the certificate
// the one given by -cert-type. It prints one line of key=value pairs (handshakes, resumed,
// ok, non_2xx, errors, timeouts, cps, version, cipher, group, cert) and exits 1 when any
// connection failed, resumed, or answered other than 2xx, naming what went wrong.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// counts are the totals over every worker.
type counts struct {
	handshakes, resumed, ok, non2xx, errs, timeouts atomic.Int64
	// inWindow counts the good requests that completed before the duration ended: the rate.
	// Those still in flight then are checked too, but a slow tail does not dilute the rate.
	inWindow atomic.Int64
	// first is the first failure seen, for the message.
	first atomic.Pointer[string]
	// state is one connection's negotiated parameters (all must agree: one server).
	stateOnce sync.Once
	version   uint16
	cipher    uint16
	group     tls.CurveID
	cert      string
}

// options are one run's settings (the flags).
type options struct {
	addr, path, host string
	conns            int
	dur, timeout     time.Duration
	// resume keeps a client session cache, so that handshakes after the first may resume: only
	// to see the resumption check fail.
	resume bool
	// closeNotify ends each connection with a TLS close_notify alert before the socket closes,
	// as a polite client does (bench/edge.sh: hitch logs every connection closed without one).
	closeNotify bool
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:443", "server address")
	flag.StringVar(&o.path, "path", "/", "request path")
	flag.StringVar(&o.host, "host", "bench.test", "Host header and SNI")
	flag.IntVar(&o.conns, "c", 16, "concurrent connections")
	flag.DurationVar(&o.dur, "d", 5*time.Second, "duration")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline of one connection (dial to close)")
	flag.BoolVar(&o.resume, "resume", false, "keep a session cache (handshakes may resume; the run then fails): to check the check")
	flag.BoolVar(&o.closeNotify, "close-notify", false, "send a TLS close_notify before closing each connection")
	flag.Parse()
	if o.conns < 1 || o.conns > 1024 || o.dur <= 0 || o.dur > time.Minute {
		fmt.Fprintln(os.Stderr, "tlsload: bounded runs only: -c 1..1024, -d up to 1m")
		os.Exit(2)
	}
	c, elapsed := load(o)
	fmt.Println(c.line(o.dur, elapsed))
	if err := c.verdict(); err != nil {
		fmt.Fprintln(os.Stderr, "tlsload:", err)
		os.Exit(1)
	}
}

// load runs o.conns workers for o.dur and returns the counts and the time it took (the last
// connections finish after o.dur).
func load(o options) (*counts, time.Duration) {
	c := &counts{}
	cfg := &tls.Config{
		ServerName:         o.host,
		InsecureSkipVerify: true, //nolint:gosec // a bench against a certificate made for the run
		MinVersion:         tls.VersionTLS13,
		// X25519 for every server: Go would offer a post-quantum hybrid first, which the
		// OpenSSL 3.0 peers do not support, and the Go proxy would take it; one group keeps
		// the key exchange the same for all.
		CurvePreferences: []tls.CurveID{tls.X25519},
		NextProtos:       []string{"http/1.1"},
		// No ClientSessionCache: the client cannot offer a session, so every handshake is full.
	}
	if o.resume {
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(64)
	}
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", o.path, o.host)
	ctx, cancel := context.WithTimeout(context.Background(), o.dur)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < o.conns; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if one(c, o.addr, cfg, req, o.timeout, o.closeNotify) && ctx.Err() == nil {
					c.inWindow.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return c, time.Since(start)
}

// one makes one connection, one handshake and one request; true when it all went well.
func one(c *counts, addr string, cfg *tls.Config, req string, timeout time.Duration, closeNotify bool) bool {
	deadline := time.Now().Add(timeout)
	raw, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		c.fail("connect", err)
		return false
	}
	defer raw.Close()
	raw.SetDeadline(deadline)
	tc := tls.Client(raw, cfg)
	if closeNotify {
		defer tc.Close() // the alert (once the handshake is done), then the socket
	}
	if err := tc.Handshake(); err != nil {
		c.fail("handshake", err)
		return false
	}
	c.handshakes.Add(1)
	st := tc.ConnectionState()
	if st.DidResume {
		c.resumed.Add(1)
		c.note("a handshake resumed a session")
	}
	c.stateOnce.Do(func() {
		c.version, c.cipher, c.group = st.Version, st.CipherSuite, st.CurveID
		c.cert = certType(st)
	})
	if _, err := io.WriteString(tc, req); err != nil {
		c.fail("write", err)
		return false
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		c.fail("read", err)
		return false
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		c.fail("read", err)
		return false
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		c.non2xx.Add(1)
		c.note(fmt.Sprintf("status %d", resp.StatusCode))
		return false
	}
	c.ok.Add(1)
	return true
}

// certType names the server certificate's key, e.g. "ECDSA P-256".
func certType(st tls.ConnectionState) string {
	if len(st.PeerCertificates) == 0 {
		return "none"
	}
	if k, ok := st.PeerCertificates[0].PublicKey.(*ecdsa.PublicKey); ok {
		return "ECDSA " + k.Curve.Params().Name
	}
	return st.PeerCertificates[0].PublicKeyAlgorithm.String()
}

// fail counts an I/O error as a timeout or an error of the step that failed.
func (c *counts) fail(step string, err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.timeouts.Add(1)
	} else {
		c.errs.Add(1)
	}
	c.note(step + ": " + err.Error())
}

func (c *counts) note(s string) { c.first.CompareAndSwap(nil, &s) }

// line is the counts as key=value pairs: the rate is the good requests that completed within
// dur, per second of dur.
func (c *counts) line(dur, elapsed time.Duration) string {
	fields := []string{
		fmt.Sprintf("handshakes=%d", c.handshakes.Load()),
		fmt.Sprintf("resumed=%d", c.resumed.Load()),
		fmt.Sprintf("ok=%d", c.ok.Load()),
		fmt.Sprintf("non_2xx=%d", c.non2xx.Load()),
		fmt.Sprintf("errors=%d", c.errs.Load()),
		fmt.Sprintf("timeouts=%d", c.timeouts.Load()),
		fmt.Sprintf("cps=%.1f", float64(c.inWindow.Load())/dur.Seconds()),
		fmt.Sprintf("elapsed=%.2fs", elapsed.Seconds()),
		"version=" + strings.ReplaceAll(tls.VersionName(c.version), " ", ""),
		"cipher=" + tls.CipherSuiteName(c.cipher),
		"group=" + c.group.String(),
		"cert=" + strings.ReplaceAll(c.cert, " ", "_"),
	}
	return strings.Join(fields, " ")
}

// verdict is nil when every connection made a full TLS 1.3 handshake and got a 2xx answer.
func (c *counts) verdict() error {
	bad := c.resumed.Load() + c.non2xx.Load() + c.errs.Load() + c.timeouts.Load()
	switch {
	case bad > 0:
		return fmt.Errorf("%d of %d connections failed or resumed; first: %s", bad, c.handshakes.Load()+c.errs.Load()+c.timeouts.Load(), *c.first.Load())
	case c.ok.Load() == 0:
		return errors.New("no request completed")
	case c.version != tls.VersionTLS13:
		return fmt.Errorf("negotiated %s, not TLS 1.3", tls.VersionName(c.version))
	}
	return nil
}
