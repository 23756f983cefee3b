package l7

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// A flood of clients that open TLS connections and never finish the handshake does not stop a
// real client's handshake and request; each stalled one is cut at read_header and counted
// (switchyard_tls_handshake_failures_total{reason="timeout"}), plain HTTP sent to the TLS port
// is counted as not_tls.
func TestTLSHandshakeFloodAndGarbage(t *testing.T) {
	b := startBackend(t, "b", nil)
	cp, kp, _ := testutil.WriteCert(t, t.TempDir(), "proxy.test")
	s, _ := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
timeouts: {read_header: 300ms}
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
	tc, err := tlsconf.Load(&tlsconf.Config{Certificates: []tlsconf.Certificate{{Cert: cp, Key: kp}}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeTLS(ln, tc)
	const flood = 100
	var stalled []net.Conn
	for range flood {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stalled = append(stalled, c)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // test certificate
	start := time.Now()
	resp, err := client.Get("https://" + ln.Addr().String() + "/x")
	if err != nil {
		t.Fatalf("a real client during the flood: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || time.Since(start) > 2*time.Second {
		t.Fatalf("a real client during the flood: %s after %v", resp.Status, time.Since(start))
	}
	for i, c := range stalled {
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("stalled connection %d: read %v, want the proxy to close it (EOF)", i, err)
		}
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: proxy.test\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	io.Copy(io.Discard, c)
	c.Close()
	testutil.Eventually(t, 3*time.Second, func() bool {
		failures := func(reason string) float64 {
			return testutil.Counter(t, s.metrics.reg, "switchyard_tls_handshake_failures_total", "reason", reason)
		}
		return failures("timeout") >= flood && failures("not_tls") == 1
	}, "handshake failures not counted by reason")
}
