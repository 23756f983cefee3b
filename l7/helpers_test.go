package l7

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// backend is a real HTTP server on loopback that names itself in X-Backend and counts requests.
type backend struct {
	name  string
	addr  string
	hits  atomic.Int64
	srv   *http.Server
	delay atomic.Int64 // nanoseconds to sleep per request
	code  atomic.Int64 // status to answer with (0 = 200)
}

func startBackend(t *testing.T, name string, h http.Handler) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{name: name, addr: ln.Addr().String()}
	if h == nil {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/health" {
				w.WriteHeader(http.StatusOK)
				return
			}
			b.hits.Add(1)
			if d := b.delay.Load(); d > 0 {
				select {
				case <-time.After(time.Duration(d)):
				case <-r.Context().Done():
				}
			}
			w.Header().Set("X-Backend", name)
			w.Header().Set("X-Seen-Path", r.URL.Path)
			for _, k := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "Forwarded", "Via", "Connection", "Keep-Alive", "X-Hop"} {
				w.Header().Set("X-Seen-"+k, strings.Join(r.Header.Values(k), "|"))
			}
			if c := b.code.Load(); c != 0 {
				w.WriteHeader(int(c))
			}
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s body=%d", name, r.Method, r.URL.Path, len(body))
		})
	}
	b.srv = &http.Server{Handler: h, Protocols: new(http.Protocols)}
	b.srv.Protocols.SetHTTP1(true)
	b.srv.Protocols.SetUnencryptedHTTP2(true)
	go b.srv.Serve(ln)
	t.Cleanup(func() { b.srv.Close() })
	return b
}

// curEngine is the engine startProxy serves on; onEveryEngine switches it (the zero value is
// the event loops with IP backends).
var curEngine engine

// onEveryEngine runs a test of the shared rule table once per engine (engines_test.go): the
// event loops, a goroutine per connection, a TLS listener and host-name backends. startProxy,
// dialProxy, rawExchange and testClient follow the engine.
func onEveryEngine(t *testing.T, test func(t *testing.T)) {
	defer func() { curEngine = engine{} }()
	for _, e := range engines {
		curEngine = e
		t.Run(e.name, test)
	}
}

// onEngines is onEveryEngine on the named engines only (for tests too heavy, or too tied to
// plain HTTP, to run on all of them).
func onEngines(t *testing.T, names []string, test func(t *testing.T)) {
	defer func() { curEngine = engine{} }()
	for _, e := range engines {
		if slices.Contains(names, e.name) {
			curEngine = e
			t.Run(e.name, test)
		}
	}
}

// backendAddr matches a backend address in a test configuration (port 0 is a listener's).
var backendAddr = regexp.MustCompile(`"127\.0\.0\.1:([1-9][0-9]*)"`)

// newTestClient is an HTTP/1.1 client for the proxy under test (TLS without verification).
func newTestClient() *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Protocols: new(http.Protocols)} //nolint:gosec // test certificate
	tr.Protocols.SetHTTP1(true)
	return &http.Client{Transport: tr}
}

// testClient is the shared newTestClient.
var testClient = newTestClient()

// dialBase opens a raw connection to the proxy at base (http:// or https://).
func dialBase(base string) (net.Conn, error) {
	if a, ok := strings.CutPrefix(base, "https://"); ok {
		return tls.Dial("tcp", a, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) //nolint:gosec // test certificate
	}
	return net.Dial("tcp", strings.TrimPrefix(base, "http://"))
}

// startProxy parses the YAML config (with %s placeholders already filled) and serves it on a
// loopback port, returning the base URL.
func startProxy(t *testing.T, yamlText string) (*Server, string) {
	t.Helper()
	if curEngine.hostNames {
		yamlText = backendAddr.ReplaceAllString(yamlText, `"localhost:$1"`)
	}
	p := curEngine.start(t, yamlText)
	if p.tls {
		return p.s, "https://" + p.addr
	}
	return p.s, "http://" + p.addr
}

func get(t *testing.T, c *http.Client, method, url string, body io.Reader, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// rawExchange writes raw bytes to the proxy and returns the first response's status line.
func rawExchange(t *testing.T, base, raw string) string {
	t.Helper()
	c, err := dialBase(base)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _ := io.ReadAtLeast(c, buf, 12)
	line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
	return line
}

// pythonWith is a python3 that imports modules, or skips the test naming the Debian packages
// that provide them. Debian's python3 comes first: its packages install there, whatever
// python3 comes first on PATH.
func pythonWith(t *testing.T, modules, debianPackages string) string {
	t.Helper()
	for _, cand := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(cand, "-c", "import "+modules).Run() == nil {
			return cand
		}
	}
	t.Skipf("needs python3 with %s (apt-get install %s; `make deps` does)", modules, debianPackages)
	return ""
}

// startPythonServer runs a test server script that prints its port on its first line and
// serves until killed; it returns the server's address, the process ended at cleanup.
func startPythonServer(t *testing.T, py, script string) string {
	t.Helper()
	cmd := exec.Command(py, script)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s printed no port: %v", script, err)
	}
	return "127.0.0.1:" + strings.TrimSpace(line)
}
