package tlsconf

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	tu "github.com/switchyard/switchyard/internal/testutil"
)

// Each way a client can fail a server handshake is counted under its reason and logged as one
// clear line: a client that stalls, one that goes away, plain HTTP sent to the TLS port, a
// ClientHello the listener cannot serve, and malformed or oversized handshake records.
func TestHandshakeFailuresByReason(t *testing.T) {
	cp, kp, _ := tu.WriteCert(t, t.TempDir(), "hs.test")
	tc, err := Load(&Config{Certificates: []Certificate{{Cert: cp, Key: kp}}})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	h := NewHandshakes(reg, slog.New(slog.NewTextHandler(&logs, nil)))
	cases := []struct {
		reason string
		client func(c net.Conn)
	}{
		{HandshakeTimeout, func(c net.Conn) { time.Sleep(time.Second) }},
		{HandshakeClosed, func(c net.Conn) {}},
		{HandshakeNotTLS, func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\nHost: hs.test\r\n\r\n")) }},
		{HandshakeRefused, func(c net.Conn) {
			tls.Client(c, &tls.Config{ServerName: "hs.test", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11, InsecureSkipVerify: true}).Handshake() //nolint:gosec // the server must refuse it
		}},
		// A handshake record whose message is garbage, and one longer than TLS allows.
		{HandshakeProtocol, func(c net.Conn) { c.Write([]byte{0x16, 3, 1, 0, 8, 0xff, 0, 0, 4, 1, 2, 3, 4}) }},
		{HandshakeProtocol, func(c net.Conn) { c.Write([]byte{0x16, 3, 1, 0xff, 0xff}) }},
	}
	for _, c := range cases {
		srv, cli := net.Pipe()
		go func() { c.client(cli); cli.Close() }()
		before := testutil.ToFloat64(h.failures.WithLabelValues(c.reason))
		err := h.Run(tls.Server(srv, tc), 300*time.Millisecond)
		srv.Close()
		if err == nil || HandshakeReason(err) != c.reason {
			t.Errorf("%s: handshake error %v, reason %q", c.reason, err, HandshakeReason(err))
		}
		if got := testutil.ToFloat64(h.failures.WithLabelValues(c.reason)) - before; got != 1 {
			t.Errorf("%s: counted %v times, want 1", c.reason, got)
		}
	}
	if n := strings.Count(logs.String(), `msg="tls handshake failed: `); n != 4 || strings.Contains(logs.String(), "client_closed") {
		t.Errorf("log: %d lines (want one per reason, none for a client that left):\n%s", n, logs.String())
	}
}
