package edge

import (
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// lockedBuffer is a log destination safe for the edge's goroutines.
type lockedBuffer struct{ testutil.SyncBuffer }

func (l *lockedBuffer) lines(msg string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, `msg="`+msg+`"`) {
			out = append(out, line)
		}
	}
	return out
}

// When every request fails the same way (out of descriptors, every upstream dial fails; here
// the origin refuses connections), the edge writes one warning a second, not one per request,
// and the next line says how many it suppressed.
func TestEdgeRateLimitsFailureWarnings(t *testing.T) {
	var logs lockedBuffer
	e, err := New(Config{Listen: "127.0.0.1:0", Origin: "http://127.0.0.1:1"}, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 0)
	e.warns.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	const n = 40
	for i := range n {
		if r := get(t, e.URL()+"/miss/"+strconv.Itoa(i)); r.status != 502 {
			t.Fatalf("request to a refusing origin: %d, want 502", r.status)
		}
		do(t, "POST", e.URL()+"/form")
	}
	for _, msg := range []string{"fetch from upstream failed", "pass to upstream failed"} {
		if got := logs.lines(msg); len(got) != 1 {
			t.Errorf("%d requests failing alike wrote %d %q lines within one second; want 1:\n%s", n, len(got), msg, strings.Join(got, "\n"))
		}
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	get(t, e.URL()+"/miss/last")
	got := logs.lines("fetch from upstream failed")
	if len(got) != 2 || !strings.Contains(got[1], "suppressed="+strconv.Itoa(n-1)) {
		t.Errorf("the line a second later: %q; want it to count the %d suppressed", got, n-1)
	}
}
