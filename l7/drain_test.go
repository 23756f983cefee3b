package l7

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// A connection accepted before (or during) a graceful shutdown that has not sent its request yet
// is not cut: its request is answered, with Connection: close. After an upgrade the old process
// accepts from the listener it shares with the new one until it closes its copy, and a client
// does not retry a request on a fresh connection that was reset.
func TestShutdownAnswersAFreshConnection(t *testing.T) {
	onEveryEngine(t, func(t *testing.T) {
		b := startBackend(t, "b", nil)
		s, base := startProxy(t, fmt.Sprintf(`
listeners: [{address: "127.0.0.1:0"}]
routes: [{name: all, pool: p}]
pools: [{name: p, backends: [{address: %q}]}]
`, b.addr))
		c, err := dialBase(base)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		testutil.Eventually(t, 10*time.Second, func() bool { return s.conns.Clients() > 0 }, "the proxy did not accept the connection")
		done := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			done <- s.Shutdown(ctx)
		}()
		for !s.shutting.Load() {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // several passes of Shutdown's idle sweep
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("request on a connection accepted before the shutdown: %v; want it answered", err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !resp.Close {
			t.Fatalf("status %d, close %v; want 200 with Connection: close", resp.StatusCode, resp.Close)
		}
		if err := <-done; err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	})
}
