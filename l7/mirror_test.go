package l7

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// A mirrored route copies its requests (head and body) to the shadow pool on every engine, a
// percent share of them when set, and a shadow that does not answer never delays the real one.
func TestMirror(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	var release chan struct{} // the shadow answers nothing until the round is over
	shadow := startBackend(t, "shadow", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+string(body))
		wait := release
		mu.Unlock()
		<-wait
	}))
	primary := startBackend(t, "primary", nil)
	forEachEngineAndH2(t, func(t *testing.T, e engine) {
		for _, pct := range []int{100, 50} {
			mu.Lock()
			seen, release = nil, make(chan struct{})
			mu.Unlock()
			p := e.start(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: r, pool: p, mirror: {pool: shadow, percent: %d}}]
pools:
  - {name: p, backends: [{address: %q}]}
  - {name: shadow, backends: [{address: %q}]}
`, pct, e.backend(primary.addr), e.backend(shadow.addr)))
			client := &http.Client{Transport: testClient.Transport, Timeout: 10 * time.Second} // a held copy must not hold the answer
			if e.h2 {
				client = h2Client(p.base())
			}
			for i := range 20 {
				start := time.Now()
				// Bodies are copied when held whole with the head; an HTTP/2 client's DATA may
				// come after its HEADERS (then the copy is skipped), so only the HTTP/1.1
				// engines' requests carry one here.
				var resp *http.Response
				var err error
				if e.h2 {
					resp, err = client.Get(fmt.Sprintf("%s/m%d", p.base(), i))
				} else {
					resp, err = client.Post(fmt.Sprintf("%s/m%d", p.base(), i), "text/plain", strings.NewReader(fmt.Sprintf("body%d", i)))
				}
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Fatalf("request %d: %s after %v", i, resp.Status, time.Since(start))
				}
			}
			want := 20 * pct / 100
			testutil.Eventually(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == want },
				"the shadow got %d copies, want %d", func() any { mu.Lock(); defer mu.Unlock(); return len(seen) }, want)
			mu.Lock()
			close(release) // every real answer came while the shadow held its copies
			if pct == 100 && !e.h2 && !strings.Contains(strings.Join(seen, "|"), "POST /m7 body7") {
				t.Errorf("the copies %q lack POST /m7 with its body", seen)
			}
			mu.Unlock()
		}
	})
}

// A mirror is checked: a known HTTP/1.1 shadow pool, a share of 1-100, HTTP/1.1 route pools.
func TestMirrorConfigErrors(t *testing.T) {
	for _, c := range []struct{ route, want string }{
		{"{name: r, pool: a, mirror: {pool: nope}}", "routes[0].mirror.pool: route \"r\" mirrors to unknown pool \"nope\""},
		{"{name: r, pool: a, mirror: {pool: g}}", "routes[0].mirror.pool: pool \"g\" speaks h2c; a shadow pool must be http1"},
		{"{name: r, pool: a, mirror: {pool: a, percent: 101}}", "routes[0].mirror.percent: 101 outside 1-100"},
		{"{name: r, pool: g, mirror: {pool: a}}", "routes[0].mirror: route \"r\" sends to h2c pool \"g\""},
	} {
		_, err := ParseConfig([]byte("listeners: [{address: \"127.0.0.1:0\"}]\nroutes: [" + c.route + "]\npools: [{name: a, backends: [{address: \"127.0.0.1:1\"}]}, {name: g, protocol: h2c, backends: [{address: \"127.0.0.1:2\"}]}]\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.route, err, c.want)
		}
	}
}
