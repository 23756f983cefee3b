package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/edge"
)

func startTestEdge(t *testing.T, cfg edge.Config) *edge.Edge {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	e, err := edge.New(cfg, edge.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// TestEdgeCLIStatsTiersAndPushObject: `edge stats --tiers` shows the chosen upper tier and the
// per-role counters; `edge push --object` stores a body that is then a hit.
func TestEdgeCLIStatsTiersAndPushObject(t *testing.T) {
	o := edgeOrigin(t)
	upper := startTestEdge(t, edge.Config{Origins: []edge.OriginConfig{{Hosts: []string{"a.test"}, URL: o.URL}}})
	lower := startTestEdge(t, edge.Config{
		Admin: edge.AdminConfig{Listen: "127.0.0.1:0", Token: "tok"},
		Origins: []edge.OriginConfig{{Hosts: []string{"a.test"}, URL: o.URL,
			Tiers: edge.TierConfig{Candidates: []string{upper.URL()}, ProbeInterval: edge.Duration(time.Hour)}}},
	})
	lower.ProbeTiers()
	for range 2 {
		req, _ := http.NewRequest("GET", lower.URL()+"/x", nil)
		req.Host = "a.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	out, err := runEdgeCLI(t, context.Background(), "edge", "stats", "--admin", lower.AdminAddr(), "--token-file", tokenFile(t, "tok"), "--tiers")
	if err != nil || !strings.Contains(out, "origin a.test") || !strings.Contains(out, "topology smart, primary "+upper.URL()) ||
		!strings.Contains(out, "  lower          2         1         0") || !strings.Contains(out, "through upper tiers: 1 requests") {
		t.Fatalf("stats --tiers: %v\n%s", err, out)
	}
	f := filepath.Join(t.TempDir(), "app.js")
	os.WriteFile(f, []byte("console.log(1)"), 0o644)
	out, err = runEdgeCLI(t, context.Background(), "edge", "push", "--admin", lower.AdminAddr(), "--token-file", tokenFile(t, "tok"),
		"--object", f, "--header", "Content-Type: text/javascript", "--header", "Cache-Control: max-age=60", "http://a.test/app.js")
	if err != nil || !strings.Contains(out, "200 PUSHED (14 bytes)") {
		t.Fatalf("push --object: %v\n%s", err, out)
	}
	req, _ := http.NewRequest("GET", lower.URL()+"/app.js", nil)
	req.Host = "a.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Cache") != "HIT" || resp.Header.Get("Content-Type") != "text/javascript" {
		t.Fatalf("pushed object: %v", resp.Header)
	}
	if _, err := runEdgeCLI(t, context.Background(), "edge", "push", "--admin", lower.AdminAddr(), "--token-file", tokenFile(t, "tok"), "--object", f); err == nil {
		t.Fatal("push --object without a URL was accepted")
	}
}
