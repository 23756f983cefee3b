package l7

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// ListenAndServe opens the configured listeners, here on 127.0.0.2 (a loopback address other
// than 127.0.0.1, like a VIP on lo), writes the access log, and shuts down when ctx ends.
func TestListenAndServeOnLoopbackVIPWithAccessLog(t *testing.T) {
	b := startBackend(t, "b", nil)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("127.0.0.2 not usable here: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	logPath := filepath.Join(t.TempDir(), "access.log")
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`
listeners: [{address: %q}]
access_log: %q
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, addr, logPath, b.addr)))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(cfg, WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.ListenAndServe(ctx) }()
	var resp *http.Response
	testutil.Eventually(t, 2*time.Second, func() bool { resp, err = http.Get("http://" + addr + "/hello"); return err == nil },
		"GET /hello: %v", func() any { return err })
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ListenAndServe: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		t.Error("listener still open after shutdown")
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(data, &line); err != nil {
		t.Fatalf("access log %q: %v", data, err)
	}
	if line["path"] != "/hello" || line["status"] != float64(200) || line["backend"] != b.addr || line["route"] != "all" {
		t.Errorf("access log line = %v", line)
	}
}
