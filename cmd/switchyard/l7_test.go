package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// runL7 runs one switchyard command and returns its output.
func runL7(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, io.Discard
	err := app.RunContext(ctx, append([]string{"switchyard"}, args...))
	return out.String(), err
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func l7Backend(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, name)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestL7RoutesFromConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "l7.yaml")
	os.WriteFile(path, []byte(`listeners: [{address: 127.0.0.1:0}]
routes:
  - {name: tracking, match: {path: {prefix: /tracking}, methods: [GET]}, pool: reads}
  - {name: event, match: {path: {exact: /event}, methods: [POST]}, pool: writes}
pools:
  - {name: reads, backends: [{address: 127.0.0.1:9001}]}
  - {name: writes, backends: [{address: 127.0.0.1:9002}]}
`), 0o600)
	out, err := runL7(t, context.Background(), "l7", "routes", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1      tracking", "/tracking*", "= /event", "writes", "first match wins"} {
		if !strings.Contains(out, want) {
			t.Errorf("routes output lacks %q:\n%s", want, out)
		}
	}
	os.WriteFile(path, []byte("listeners: [{address: 127.0.0.1:0}]\nroutes: [{name: r, pool: nope}]\n"), 0o600)
	if _, err := runL7(t, context.Background(), "l7", "routes", "--config", path); err == nil || !strings.Contains(err.Error(), "line 2: routes[0].pool") {
		t.Errorf("bad config error = %v, want line and field", err)
	}
	if _, err := runL7(t, context.Background(), "l7", "run"); err == nil || !strings.Contains(err.Error(), "--config is required") {
		t.Errorf("run without config: %v", err)
	}
}

// l7 run is a complete process: listeners and admin from the file; backends and drain talk to it.
func TestL7RunBackendsDrain(t *testing.T) {
	a, b := l7Backend(t, "a"), l7Backend(t, "b")
	listen, admin := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "l7.yaml")
	os.WriteFile(path, []byte(fmt.Sprintf(`listeners: [{address: %q}]
admin: {address: %q, token: t0k3n}
routes: [{name: all, pool: app}]
pools: [{name: app, backends: [{address: %q}, {address: %q}]}]
`, listen, admin, a, b)), 0o600)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := runL7(t, ctx, "l7", "run", "--config", path); done <- err }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("l7 run ended with %v", err)
		}
	}()
	testutil.Eventually(t, 5*time.Second, func() bool {
		c, err := net.Dial("tcp", listen)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "l7 run did not listen")
	// Drain and reload change the running proxy: without the token they are refused.
	if _, err := runL7(t, ctx, "l7", "drain", "--admin", admin, "--pool", "app", "--backend", a); err == nil || !strings.Contains(err.Error(), "unauthorized: pass the proxy's admin.token with --token-file") {
		t.Fatalf("drain without the token: %v, want it refused", err)
	}
	if _, err := runL7(t, ctx, "l7", "reload", "--admin", admin); err == nil || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("reload without the token: %v, want it refused", err)
	}
	out, err := runL7(t, ctx, "l7", "drain", "--admin", admin, "--token-file", tokenFile(t, "t0k3n"), "--pool", "app", "--backend", a)
	if err != nil || !strings.Contains(out, "draining") {
		t.Fatalf("drain: %v\n%s", err, out)
	}
	for i := 0; i < 4; i++ {
		resp, err := http.Get("http://" + listen + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(body) != "b" {
			t.Fatalf("request %d went to %q after draining a", i, body)
		}
	}
	out, err = runL7(t, ctx, "l7", "backends", "--admin", admin)
	if err != nil || !strings.Contains(out, a) || !strings.Contains(out, "draining") {
		t.Errorf("backends: %v\n%s", err, out)
	}
	if _, err := runL7(t, ctx, "l7", "drain", "--admin", admin, "--token-file", tokenFile(t, "t0k3n"), "--pool", "nope", "--backend", a); err == nil || !strings.Contains(err.Error(), "unknown pool") {
		t.Errorf("drain of unknown pool: %v", err)
	}
	out, err = runL7(t, ctx, "l7", "routes", "--admin", admin)
	if err != nil || !strings.Contains(out, "all") {
		t.Errorf("routes --admin: %v\n%s", err, out)
	}
	if _, err := runL7(t, ctx, "l7", "reload", "--admin", admin, "--token-file", tokenFile(t, "t0k3n")); err != nil {
		t.Errorf("reload: %v", err)
	}
}
