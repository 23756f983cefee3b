package l7

import (
	"bufio"
	"crypto/tls"
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
			startHAProxy(t, bin, fmt.Sprintf(`global
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
`, front, proxyAddr, send), front)
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

// startHAProxy runs haproxy -db with cfg, killed at cleanup, and waits until it listens on addr.
func startHAProxy(t *testing.T, bin, cfg, addr string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "haproxy.cfg")
	os.WriteFile(path, []byte(cfg), 0o600)
	cmd := exec.Command(bin, "-db", "-f", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	testutil.Eventually(t, 5*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "haproxy did not listen on %s", addr)
}

// A pool with send_proxy_protocol starts each backend connection with a PROXY header, read by
// HAProxy's accept-proxy (a real receiver) in front of the backend: on every engine, two
// keep-alive clients (127.0.0.2 and 127.0.0.3) interleaving requests each keep their own
// address (a connection carries one client's requests), and health checks (a LOCAL header)
// keep the backend up.
func TestSendProxyProtocolToHAProxy(t *testing.T) {
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed (apt-get install haproxy)")
	}
	b := startBackend(t, "b", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Echo-Src", r.Header.Get("X-Proxy-Src"))
	}))
	for _, v := range []string{"v1", "v2"} {
		front := testutil.FreeAddr(t)
		startHAProxy(t, bin, fmt.Sprintf(`global
  log stderr format short local0 err
defaults
  mode http
  timeout connect 2s
  timeout client 10s
  timeout server 10s
frontend fe
  bind %s accept-proxy
  http-request set-header X-Proxy-Src %%[src]
  default_backend be
backend be
  server b %s
`, front, b.addr), front)
		forEachEngineAndH2(t, func(t *testing.T, e engine) {
			if e.hostNames {
				return // the same paths as IP backends
			}
			p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p}]
pools: [{name: p, send_proxy_protocol: %s, backends: [{address: %q}],
  health: {path: /health, interval: 100ms, timeout: 100ms}}]
`, v, front))
			clients := map[string]*http.Client{}
			for _, src := range []string{"127.0.0.2", "127.0.0.3"} {
				tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test certificate
					DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}).DialContext}
				if e.h2 {
					tr.Protocols = new(http.Protocols)
					tr.Protocols.SetUnencryptedHTTP2(!e.tls)
					tr.Protocols.SetHTTP2(e.tls)
				}
				clients[src] = &http.Client{Timeout: 5 * time.Second, Transport: tr}
			}
			for i := 0; i < 6; i++ {
				for src, c := range clients {
					resp, err := c.Get(p.base() + "/x")
					if err != nil {
						t.Fatalf("%s %s: %v", v, src, err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if got := resp.Header.Get("Echo-Src"); resp.StatusCode != 200 || got != src {
						t.Fatalf("%s request %d from %s: %s, HAProxy read the source %q from the PROXY header", v, i, src, resp.Status, got)
					}
				}
			}
			time.Sleep(300 * time.Millisecond) // health checks through accept-proxy (LOCAL headers)
			if !p.s.state.Load().pools["p"].backends[0].Healthy() {
				t.Errorf("%s: health checks through accept-proxy failed", v)
			}
		})
	}
}
