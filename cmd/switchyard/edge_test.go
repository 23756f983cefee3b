package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/edge"
	"github.com/switchyard/switchyard/internal/testutil"
)

// runEdgeCLI runs a switchyard command with captured output.
func runEdgeCLI(t *testing.T, ctx context.Context, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.RunContext(ctx, append([]string{"switchyard"}, args...))
	return out.String(), err
}

func edgeOrigin(t *testing.T) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Surrogate-Key", "assets")
		fmt.Fprint(w, "object "+r.URL.Path)
	}))
	t.Cleanup(o.Close)
	return o
}

func TestEdgeCLIPurgePushStats(t *testing.T) {
	o := edgeOrigin(t)
	e, err := edge.New(edge.Config{Listen: "127.0.0.1:0", Origin: o.URL,
		Admin: edge.AdminConfig{Listen: "127.0.0.1:0", Token: "tok"}}, edge.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	list := filepath.Join(t.TempDir(), "common.txt")
	os.WriteFile(list, []byte("# common objects\nhttp://www.example.com/app.js\n\nhttp://www.example.com/style.css\n"), 0o644)

	out, err := runEdgeCLI(t, context.Background(), "edge", "push", "--admin", e.AdminAddr(), "--token-file", tokenFile(t, "tok"), "--file", list)
	if err != nil || strings.Count(out, " 200 MISS") != 2 {
		t.Fatalf("push: %v\n%s", err, out)
	}
	req, _ := http.NewRequest("GET", e.URL()+"/app.js", nil)
	req.Host = "www.example.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Cache") != "HIT" {
		t.Fatalf("pushed object not a hit: %s", resp.Header.Get("X-Cache"))
	}
	out, err = runEdgeCLI(t, context.Background(), "edge", "stats", "--admin", e.AdminAddr(), "--token-file", tokenFile(t, "tok"))
	if err != nil || !strings.Contains(out, "2 objects") || !strings.Contains(out, "hits               1") {
		t.Fatalf("stats: %v\n%s", err, out)
	}
	out, err = runEdgeCLI(t, context.Background(), "edge", "purge", "--admin", e.AdminAddr(), "--token-file", tokenFile(t, "tok"), "--tag", "assets")
	if err != nil || !strings.Contains(out, "purged 2") {
		t.Fatalf("purge: %v\n%s", err, out)
	}
	if _, err := runEdgeCLI(t, context.Background(), "edge", "purge", "--admin", e.AdminAddr(), "--token-file", tokenFile(t, "wrong"), "http://www.example.com/x"); err == nil || !strings.Contains(err.Error(), "unauthorized") {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := runEdgeCLI(t, context.Background(), "edge", "purge", "--admin", e.AdminAddr(), "--token-file", tokenFile(t, "tok")); err == nil || !strings.Contains(err.Error(), "nothing to purge") {
		t.Fatalf("empty purge: %v", err)
	}
}

// edge purge --fleet reaches the edge's fleet peers and reports each member's state; a member
// that never comes up makes it fail, naming the job to follow.
func TestEdgeCLIFleetPurge(t *testing.T) {
	o := edgeOrigin(t)
	start := func(admin string, fleet *edge.FleetConfig) *edge.Edge {
		e, err := edge.New(edge.Config{Listen: "127.0.0.1:0", Origin: o.URL,
			Admin: edge.AdminConfig{Listen: admin, Token: "tok", Fleet: fleet}}, edge.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		return e
	}
	b := start("127.0.0.1:0", nil)
	down := testutil.FreeAddr(t)
	a := start("127.0.0.1:0", &edge.FleetConfig{Peers: []edge.PushPeer{{Admin: b.AdminAddr(), Token: "tok"}}})
	out, err := runEdgeCLI(t, context.Background(), "edge", "purge", "--fleet", "--admin", a.AdminAddr(), "--token-file", tokenFile(t, "tok"), "http://www.example.com/x")
	if err != nil || !strings.Contains(out, b.AdminAddr()+": applied after 1 attempts") {
		t.Fatalf("fleet purge: %v\n%s", err, out)
	}
	c := start("127.0.0.1:0", &edge.FleetConfig{Peers: []edge.PushPeer{{Admin: down, Token: "tok"}}, RetryFor: edge.Duration(300 * time.Millisecond)})
	out, err = runEdgeCLI(t, context.Background(), "edge", "purge", "--fleet", "--admin", c.AdminAddr(), "--token-file", tokenFile(t, "tok"), "http://www.example.com/x")
	if err == nil || !strings.Contains(err.Error(), "1 members have not applied it") || !strings.Contains(out, down+": failed") {
		t.Fatalf("fleet purge with a member down: %v\n%s", err, out)
	}
}

func TestEdgeCLIRun(t *testing.T) {
	o := edgeOrigin(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := filepath.Join(t.TempDir(), "edge.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("listen: %s\norigin: %s\nmemory:\n  max_bytes: 16MiB\n", addr, o.URL)), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out string
	go func() {
		var err error
		out, err = runEdgeCLI(t, ctx, "edge", "run", "--config", cfg, "--grace", "5s")
		done <- err
	}()
	var body string
	for i := 0; i < 100; i++ {
		resp, err := http.Get("http://" + addr + "/index.html")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("edge run: %v", err)
	}
	if body != "object /index.html" || !strings.Contains(out, "edge listening on "+addr) {
		t.Fatalf("body %q, output %q", body, out)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("origin: http://127.0.0.1:1\nmemory:\n  max_byte: 1\n"), 0o644)
	if _, err := runEdgeCLI(t, context.Background(), "edge", "run", "--config", bad); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("bad config: %v", err)
	}
	if _, err := runEdgeCLI(t, context.Background(), "edge", "run", "--listen", "127.0.0.1:0"); err == nil || !strings.Contains(err.Error(), "origin") {
		t.Fatalf("missing origin: %v", err)
	}
}

func TestEdgeCLIHelpHasExamples(t *testing.T) {
	for _, sub := range []string{"run", "purge", "push", "stats"} {
		out, err := runEdgeCLI(t, context.Background(), "edge", sub, "--help")
		if err != nil || !strings.Contains(out, "Examples:") {
			t.Fatalf("edge %s --help: %v\n%s", sub, err, out)
		}
	}
}
