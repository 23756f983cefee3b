package webui

import (
	"context"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/testenv/browser"
)

// TestPageInChromium loads the page in headless Chromium against stop-shaped registries that
// keep counting, and waits until the live numbers move: the frame counter, the app and L7
// rates; no console error or exception on the way. SWITCHYARD_UI_SHOT=path saves a screenshot.
func TestPageInChromium(t *testing.T) {
	if _, err := browser.Find(); err != nil {
		t.Skip(err)
	}
	s, targets := serveRegistries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	go func() { // traffic: every series moves
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			s.dnsQ.WithLabelValues("lab.test.", "A", "NOERROR").Add(3)
			s.edgeHits.Add(2)
			s.edgeMiss.Inc()
			s.l4VIP.WithLabelValues("web").Add(float64(10 + i%7))
			s.l4BE.WithLabelValues("10.0.0.1").Add(5)
			s.l7Req.WithLabelValues("all", "app", "b", "200").Add(2)
			s.l7Dur.WithLabelValues("all", "app").Observe(0.004)
			s.app.WithLabelValues("be1").Add(float64(1 + i%3))
		}
	}()
	c := NewCollector(targets, Options{Interval: 250 * time.Millisecond, Title: "webui test"})
	go c.Run(ctx)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	checkPage(ctx, t, srv.URL, os.Getenv("SWITCHYARD_UI_SHOT"))
}

// checkPage opens url in Chromium, waits for five frames whose app total changes and checks
// every panel shows numbers, then that nothing went to the console as an error.
func checkPage(ctx context.Context, t *testing.T, url, shot string) {
	t.Helper()
	b, err := browser.Start(ctx, 1400, 1500)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	type view struct {
		Seq                                int
		DNS, Edge, Ratio, L4, L7, P99, App string
		Conn                               string
	}
	read := `(() => { const g = id => document.getElementById(id).textContent; return {Seq: +g("seq"),
		DNS: g("dns-total"), Edge: g("edge-total"), Ratio: g("edge-ratio"), L4: g("l4-total"), L7: g("l7-total"),
		P99: g("l7-p99"), App: g("app-total"), Conn: g("conn")}; })()`
	var first, v view
	apps := map[string]bool{}
	for {
		if err := b.Eval(ctx, read, &v); err != nil {
			t.Fatal(err)
		}
		if first.Seq == 0 && v.Seq > 0 {
			first = v
		}
		apps[v.App] = true
		if first.Seq > 0 && v.Seq >= first.Seq+5 && len(apps) >= 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the page's numbers did not move: first %+v, last %+v", first, v)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for name, x := range map[string]string{"dns": v.DNS, "edge": v.Edge, "ratio": v.Ratio, "l4": v.L4, "l7": v.L7, "p99": v.P99, "app": v.App} {
		if x == "-" || x == "" || strings.HasPrefix(x, "0.0") && name != "ratio" {
			t.Errorf("panel %s shows %q, want a live number (view %+v)", name, x, v)
		}
	}
	if v.Conn != "live" {
		t.Errorf("connection state %q, want live", v.Conn)
	}
	var charts int
	if err := b.Eval(ctx, `document.querySelectorAll(".uplot").length`, &charts); err != nil || charts < 9 {
		t.Errorf("%d uPlot charts drawn (err %v), want all 9 panels' charts", charts, err)
	}
	if shot != "" {
		png, err := b.Screenshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(shot, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if errs := b.Errors(); len(errs) > 0 {
		t.Errorf("console errors:\n%s", strings.Join(errs, "\n"))
	}
}
