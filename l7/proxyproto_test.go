package l7

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// HAProxy in front (send-proxy, send-proxy-v2) passes each client's address in a PROXY header:
// the backend sees the client (127.0.0.2), not HAProxy (127.0.0.1), on plain and TLS-less
// listeners alike; a trusted source without the header is cut, and an untrusted one that sends
// a header gets no say over its address (its header is not HTTP: 400).
func TestProxyProtocolFromHAProxy(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed (apt-get install haproxy)")
	}
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Echo-XFF", r.Header.Get("X-Forwarded-For"))
	}))
	proxyAddr := testutil.FreeAddr(t)
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
listeners: [{address: %q, proxy_protocol: {trusted: [127.0.0.1]}}]
routes: [{name: r, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, proxyAddr, b.addr)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(cfg, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, send := range []string{"send-proxy", "send-proxy-v2"} {
		t.Run(send, func(t *testing.T) {
			front := testutil.FreeAddr(t)
			cfg := filepath.Join(t.TempDir(), "haproxy.cfg")
			os.WriteFile(cfg, []byte(fmt.Sprintf(`global
  log stderr format short local0 err
defaults
  mode http
  timeout connect 2s
  timeout client 10s
  timeout server 10s
frontend fe
  bind %s
  default_backend be
backend be
  server l7 %s %s source 127.0.0.1
`, front, proxyAddr, send)), 0o600)
			cmd := exec.Command(bin, "-db", "-f", cfg)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
				DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
			var resp *http.Response
			testutil.Eventually(t, 5*time.Second, func() bool {
				resp, err = client.Get("http://" + front + "/x")
				return err == nil
			}, "haproxy did not answer: %v", func() any { return err })
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got := resp.Header.Get("Echo-XFF"); got != "127.0.0.2" {
				t.Fatalf("%s: the backend saw X-Forwarded-For %q, want the client 127.0.0.2", resp.Status, got)
			}
		})
	}
	// A trusted source (127.0.0.1) without the header is cut.
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: a\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, _ := c.Read(make([]byte, 64)); n != 0 {
		t.Error("a trusted source without a PROXY header was served")
	}
	c.Close()
	// An untrusted source (127.0.0.3) cannot claim an address with a header.
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 3)}}
	c, err = d.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "PROXY TCP4 203.0.113.9 127.0.0.1 5555 80\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 400 {
		t.Fatalf("an untrusted PROXY header: %v %v, want a 400", resp, err)
	}
}
