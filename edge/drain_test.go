package edge

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// A connection accepted before Close that has not sent its request yet is not cut: its request
// is answered (from memory on the fast path, from the origin otherwise). After an upgrade the old
// process accepts from the listener it shares with the new one until it closes its copy, and a
// client does not retry a request on a fresh connection that was reset.
func TestCloseAnswersAFreshConnection(t *testing.T) {
	for _, path := range []string{"/hit", "/miss"} {
		t.Run(path, func(t *testing.T) {
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hit" {
					w.Header().Set("Cache-Control", "max-age=60")
				}
				fmt.Fprint(w, "body")
			})
			e := newEdge(t, o.URL, nil)
			expect(t, get(t, e.URL()+"/hit"), 200, "MISS", "body") // now in memory
			c, err := net.Dial("tcp", e.Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			testutil.Eventually(t, 10*time.Second, func() bool { return e.fast.Open() >= 1 }, "the edge did not accept the connection")
			done := make(chan error, 1)
			go func() { done <- e.Close() }()
			for !e.fast.Closing() {
				time.Sleep(time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // several passes of the idle sweep
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: a\r\n\r\n", path)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("request on a connection accepted before Close: %v; want it answered", err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d; want 200", resp.StatusCode)
			}
			if err := <-done; err != nil {
				t.Fatalf("close: %v", err)
			}
		})
	}
}
