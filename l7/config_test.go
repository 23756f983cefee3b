package l7

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/internal/yamlx"
)

func TestConfigErrorsNameLineAndField(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"listeners: [{address: 127.0.0.1:1}]\nroutes: [{name: r, pool: nope}]\npools: []\n", "line 2: routes[0].pool"},
		{"listeners: [{address: 127.0.0.1:1}]\npools:\n  - name: p\n    balance: random\n    backends: [{address: a:1}]\n", "line 4: pools[0].balance"},
		{"listeners: [{address: 127.0.0.1:1}]\npools:\n  - name: p\n    balance: hash\n    hash: {key: body}\n    backends: [{address: a:1}]\n", "line 5: pools[0].hash.key"},
		{"listeners: [{address: 127.0.0.1:1}]\npools:\n  - name: p\n    backends: [{address: a:1}]\n    colour: blue\n", "line 5: pools[0].colour: unknown field"},
		{"listeners: [{address: 8080}]\n", "line 1: listeners[0].address"},
		{"listeners: [{address: 127.0.0.1:1}]\nroutes:\n  - {name: r, pool: p, match: {path: {regex: '('}}}\npools: [{name: p, backends: [{address: a:1}]}]\n", "missing closing )"},
		{"pools: []\n", "no listeners"},
		{"listeners: [{address: 127.0.0.1:1}]\nlimits:\n  max_connections: -5\n", "line 3: limits.max_connections"},
		{"listeners: [{address: 127.0.0.1:1}]\nroutes:\n  - {name: r, pool: p, retry: {attempts: 1, grpc_status: [UNAVAILABEL]}}\npools: [{name: p, backends: [{address: a:1}]}]\n", "line 3: routes[0].retry.grpc_status: \"UNAVAILABEL\" is not a gRPC error status; use a name such as UNAVAILABLE"},
	}
	for _, c := range cases {
		_, err := ParseConfig([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %q: error %v, want it to mention %q", c.yaml, err, c.want)
		}
	}
}

func TestReloadKeepsOldConfigOnError(t *testing.T) {
	a := startBackend(t, "a", nil)
	b := startBackend(t, "b", nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "l7.yaml")
	write := func(addr string) {
		os.WriteFile(path, []byte(fmt.Sprintf("listeners: [{address: 127.0.0.1:0}]\nroutes: [{name: r, pool: p}]\npools: [{name: p, backends: [{address: %q}]}]\n", addr)), 0o600)
	}
	write(a.addr)
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(cfg, WithConfigPath(path))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	send := func() string {
		rec := &captureWriter{header: http.Header{}}
		req, _ := http.NewRequest("GET", "http://x/y", nil)
		req.RemoteAddr = "127.0.0.1:5"
		s.ServeHTTP(rec, req)
		return rec.header.Get("X-Backend")
	}
	if got := send(); got != "a" {
		t.Fatalf("before reload: %q", got)
	}
	os.WriteFile(path, []byte("listeners: [{address: 127.0.0.1:0}]\nroutes: [{name: r, pool: missing}]\n"), 0o600)
	if err := s.ReloadFile(); err == nil || !strings.Contains(err.Error(), "unknown pool") {
		t.Fatalf("bad reload error = %v", err)
	}
	if got := send(); got != "a" {
		t.Errorf("after failed reload: %q, want the old config still serving", got)
	}
	write(b.addr)
	if err := s.ReloadFile(); err != nil {
		t.Fatal(err)
	}
	if got := send(); got != "b" {
		t.Errorf("after good reload: %q", got)
	}
}

type captureWriter struct {
	header http.Header
	code   int
}

func (c *captureWriter) Header() http.Header         { return c.header }
func (c *captureWriter) Write(p []byte) (int, error) { return len(p), nil }
func (c *captureWriter) WriteHeader(code int)        { c.code = code }

// A configuration file past yamlx.MaxFileBytes is refused before it is read into the running
// process (a 100 MB file once took it from 36 to 667 MB), and the running configuration stays.
func TestReloadRefusesOversizeFile(t *testing.T) {
	a := startBackend(t, "a", nil)
	path := filepath.Join(t.TempDir(), "l7.yaml")
	good := fmt.Sprintf("listeners: [{address: 127.0.0.1:0}]\nroutes: [{name: r, pool: p}]\npools: [{name: p, backends: [{address: %q}]}]\n", a.addr)
	os.WriteFile(path, []byte(good), 0o600)
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(cfg, WithConfigPath(path))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	big := good + strings.Repeat("# padding\n", yamlx.MaxFileBytes/10)
	os.WriteFile(path, []byte(big), 0o600)
	err = s.ReloadFile()
	want := fmt.Sprintf("%d bytes, over the limit of %d (16 MiB)", len(big), yamlx.MaxFileBytes)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
		t.Fatalf("reload of a %d-byte file: %v; want %q naming %s", len(big), err, want, path)
	}
	if s.Config() != cfg {
		t.Error("a refused reload replaced the running configuration")
	}
}
