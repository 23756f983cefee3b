// Package webuitest checks switchyard's live web view in a real headless Chromium: the page
// loads, its numbers move, every panel asked for shows a live number, every chart is drawn and
// nothing reaches the console as an error. The webui tests and the lab's end-to-end test use it.
package webuitest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/webui/browser"
)

// Panels are the ids of the page's headline numbers, by stop.
var Panels = map[string]string{"dns": "dns-total", "edge": "edge-total", "edge-ratio": "edge-ratio",
	"l4": "l4-total", "l7": "l7-total", "l7-p99": "l7-p99", "app": "app-total"}

// View is what the page shows at one moment: the frame counter, the connection state and the
// headline number of every panel.
type View struct {
	Seq  int
	Conn string
	Nums map[string]string
}

// Check is what CheckPage expects of the page at URL.
type Check struct {
	URL string
	// Live are the panels (keys of Panels) that must show a number above zero; the first must
	// take at least three different values, so the numbers are seen to move.
	Live []string
	// Charts is how many uPlot charts must be drawn (9: every panel's).
	Charts int
	// Shot, when set, receives a PNG of the page.
	Shot string
}

// CheckPage opens the page in Chromium and waits (until ctx ends) for three frames after the
// first, for every Live panel to show a number above zero and for the first to move; then the
// charts must be drawn and the console must have had no error.
func CheckPage(ctx context.Context, t *testing.T, want Check) View {
	t.Helper()
	url, shot := want.URL, want.Shot
	b, err := browser.Start(ctx, 1400, 1500)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Navigate(ctx, url); err != nil {
		t.Fatal(err)
	}
	var js strings.Builder
	js.WriteString(`(() => { const g = id => document.getElementById(id).textContent; return {Seq: +g("seq"), Conn: g("conn"), Nums: {`)
	for k, id := range Panels {
		fmt.Fprintf(&js, "%q: g(%q), ", k, id)
	}
	js.WriteString(`}}; })()`)
	var v View
	firstSeq := 0
	moving := map[string]bool{} // values of the first Live panel
	live := map[string]bool{}   // panels seen above zero (the DNS rate is 0 between resolutions)
	for {
		if err := b.Eval(ctx, js.String(), &v); err != nil {
			t.Fatal(err)
		}
		if firstSeq == 0 {
			firstSeq = v.Seq
		}
		moving[v.Nums[want.Live[0]]] = true
		markLive(v, live)
		if firstSeq > 0 && v.Seq >= firstSeq+3 && len(moving) >= 3 && allLive(live, want.Live) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the page's numbers did not all move: first frame %d, values of %s %v, last %+v, seen live %v (want live: %v)", firstSeq, want.Live[0], moving, v, live, want.Live)
		case <-time.After(250 * time.Millisecond):
		}
	}
	if v.Conn != "live" {
		t.Errorf("connection state %q, want live", v.Conn)
	}
	var charts int
	if err := b.Eval(ctx, `document.querySelectorAll(".uplot").length`, &charts); err != nil || charts < want.Charts {
		t.Errorf("%d uPlot charts drawn (err %v), want %d", charts, err, want.Charts)
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
	return v
}

// markLive records the panels that show a number above zero ("67%", "9.9 ms" and "12.5" count).
func markLive(v View, live map[string]bool) {
	for p, x := range v.Nums {
		s := strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(x, "%"), " ms"))
		if f, err := strconv.ParseFloat(s, 64); err == nil && f > 0 {
			live[p] = true
		}
	}
}

func allLive(live map[string]bool, want []string) bool {
	for _, p := range want {
		if !live[p] {
			return false
		}
	}
	return true
}
