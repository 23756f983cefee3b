package webui

import (
	"context"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/webui/browser"
	"github.com/switchyard/switchyard/internal/webui/webuitest"
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
	webuitest.CheckPage(ctx, t, webuitest.Check{URL: srv.URL, Live: []string{"app", "dns", "edge", "edge-ratio", "l4", "l7", "l7-p99"},
		Charts: 9, Shot: os.Getenv("SWITCHYARD_UI_SHOT")})
}
