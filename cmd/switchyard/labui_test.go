package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/deploy/grafana"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/internal/webui/browser"
	"github.com/switchyard/switchyard/internal/webui/webuitest"
	"github.com/switchyard/switchyard/lab"
)

// TestLabUIAndPrometheus brings up the smallest lab with every stop (one client, balancer
// daemon with --metrics, two backends, one L7 proxy, the edge and DNS), sends the demo's traffic
// and, on that one lab: loads the live page in headless Chromium until every panel's number
// moves, with no console error (a screenshot goes to SWITCHYARD_UI_SHOT when set); waits for the
// lab's Prometheus to have every target up; runs one query per stop; and runs every expression
// of the Grafana dashboard, each of which must return series.
func TestLabUIAndPrometheus(t *testing.T) {
	testutil.RequireLab(t)
	if _, err := browser.Find(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("prometheus"); err != nil {
		t.Skip("prometheus not installed (apt-get install -y prometheus, or `make deps`)")
	}
	t.Setenv("SWITCHYARD_BIN", buildLabBinary(t, "switchyard"))
	prefix := labPrefix(t, "w")
	out, err := runLab(t, "lab", "up", "--prefix", prefix, "--clients", "1", "--balancers", "1", "--backends", "2",
		"--l7", "1", "--store-members", "0", "--static-routes")
	if err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	st, err := lab.LoadState(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if st.UI == "" || st.Prometheus == "" || !strings.Contains(out, "live view:  "+st.UI) || !strings.Contains(out, "prometheus: "+st.Prometheus) {
		t.Fatalf("lab up does not print the web view and Prometheus (state: %q %q):\n%s", st.UI, st.Prometheus, out)
	}
	runDemo(t, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	shot := os.Getenv("SWITCHYARD_UI_SHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "ui.png")
	}
	webuitest.CheckPage(ctx, t, webuitest.Check{URL: st.UI, Live: []string{"app", "dns", "edge", "edge-ratio", "l4", "l7", "l7-p99"}, Charts: 9, Shot: shot})
	prom := strings.TrimSuffix(st.Prometheus, "/")
	waitTargetsUp(ctx, t, prom, len(lab.Targets(st)))
	for job, metric := range map[string]string{"dns": "switchyard_dns_queries_total", "edge": "switchyard_edge_hits_total",
		"l4": "switchyard_l4_vip_packets_total", "l7": "switchyard_l7_requests_total", "app": "switchyard_lab_app_requests_total"} {
		if n := waitSeries(ctx, t, prom, fmt.Sprintf(`sum by (instance) (%s{job=%q})`, metric, job)); n == 0 {
			t.Errorf("prometheus has no %s from job %s", metric, job)
		}
	}
	d, err := grafana.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range d.Queries("30s") {
		if n := waitSeries(ctx, t, prom, q.Expr); n == 0 {
			t.Errorf("dashboard %s / %s: no series from %s", q.Row, q.Panel, q.Expr)
		}
	}
}

// runDemo runs `lab demo` on the lab (which it then leaves up) until the test ends.
func runDemo(t *testing.T, prefix string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan string)
	go func() {
		var out bytes.Buffer
		app := newApp()
		app.Writer, app.ErrWriter = &out, &out
		app.ExitErrHandler = func(*cli.Context, error) {}
		err := app.RunContext(ctx, []string{"switchyard", "lab", "demo", "--prefix", prefix, "--duration", "90s", "--rate", "60"})
		done <- fmt.Sprintf("%v\n%s", err, out.String())
	}()
	t.Cleanup(func() {
		cancel()
		if out := <-done; t.Failed() {
			t.Logf("lab demo: %s", out)
		}
	})
}

// waitTargetsUp waits until Prometheus has want active targets, every one up.
func waitTargetsUp(ctx context.Context, t *testing.T, prom string, want int) {
	t.Helper()
	var last string
	for {
		var r struct {
			Data struct {
				ActiveTargets []struct {
					Labels    map[string]string `json:"labels"`
					Health    string            `json:"health"`
					LastError string            `json:"lastError"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := getJSON(ctx, prom+"/api/v1/targets", &r); err == nil {
			up := 0
			var b strings.Builder
			for _, x := range r.Data.ActiveTargets {
				if x.Health == "up" {
					up++
				}
				fmt.Fprintf(&b, "%s/%s %s %s; ", x.Labels["job"], x.Labels["instance"], x.Health, x.LastError)
			}
			last = b.String()
			if up == want && len(r.Data.ActiveTargets) == want {
				return
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("prometheus: want %d targets up, have: %s", want, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitSeries runs an instant query until it answers series (a rate needs two scrapes in its
// window, so right after the targets come up it has none yet) or ctx ends; it returns the
// number of series of the last answer.
func waitSeries(ctx context.Context, t *testing.T, prom, q string) int {
	t.Helper()
	for {
		n, err := promSeries(ctx, prom, q)
		if err != nil {
			t.Errorf("query %s: %v", q, err)
			return 0
		}
		if n > 0 || ctx.Err() != nil {
			return n
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// promSeries runs an instant query and returns the number of series it answers; a query
// Prometheus refuses is an error.
func promSeries(ctx context.Context, prom, q string) (int, error) {
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(ctx, prom+"/api/v1/query?query="+url.QueryEscape(q), &r); err != nil {
		if ctx.Err() != nil {
			return 0, nil // the caller reports the missing series
		}
		return 0, err
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s: %s", r.Status, r.Error)
	}
	return len(r.Data.Result), nil
}

func getJSON(ctx context.Context, u string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}
