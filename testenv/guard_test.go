package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/maps"
)

// TestGuardLimitsOneSource: with a per-source limit of 5 new connections a second on the web
// VIP, a burst of 40 connection attempts from one client gets few through (the rest of its SYNs
// are dropped in XDP, counted as source_rate), while the other client, at the same time, connects
// every time; and a keep-alive connection the flooding client opened before goes on serving
// requests throughout: an established flow is never limited.
func TestGuardLimitsOneSource(t *testing.T) {
	l := testLab(t, 2)
	withApps(t, l)
	f := withForwarder(t, l)
	var id uint32
	found := false
	for _, v := range l.VIPs {
		if v.Key == (maps.VIPKey{Addr: lab.WebVIP4, Port: 80, Proto: maps.TCP}) {
			id, found = v.ID, true
		}
	}
	if !found {
		t.Fatal("the lab has no web VIP on port 80")
	}
	url := fmt.Sprintf("http://%s/", lab.WebVIP4)
	// Established before the guard is on.
	keep := lab.HTTPClient(l.Client(1), true, 5*time.Second)
	if code, _, _, err := get(keep, url); err != nil || code != 200 {
		t.Fatalf("keep-alive request: %d %v", code, err)
	}
	want := maps.GuardState{VIPs: map[uint32]maps.GuardVIP{id: {SourcePrefix4: 32, SourcePrefix6: 64, PerSource: maps.GuardLimit{Rate: 5, Burst: 5}}}}
	if err := f.Maps.WriteGuard(maps.GuardState{}, want); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Maps.WriteGuard(want, maps.GuardState{}) })
	before, err := f.Maps.GuardCounters()
	if err != nil {
		t.Fatal(err)
	}
	const flood, other = 40, 5 // the other client stays within its own burst
	var flooded, otherOK atomic.Int32
	var wg sync.WaitGroup
	dial := namednetns.Dialer(l.Client(1).NS, &net.Dialer{Timeout: 700 * time.Millisecond})
	vip := netip.AddrPortFrom(lab.WebVIP4, 80).String()
	for range flood {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial(context.Background(), "tcp", vip)
			if err == nil {
				flooded.Add(1)
				c.Close()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := lab.HTTPClient(l.Client(2), false, 5*time.Second)
		for range other {
			if code, _, _, err := get(c, url); err == nil && code == 200 {
				otherOK.Add(1)
			}
		}
	}()
	// The established flow of the limited client, during the flood: every request on the
	// connection opened before (a new connection would be limited like the flood).
	for i := range 5 {
		keepGet(t, keep, url, fmt.Sprintf("keep-alive request %d during the flood", i))
	}
	wg.Wait()
	after, err := f.Maps.GuardCounters()
	if err != nil {
		t.Fatal(err)
	}
	dropped := after["source_rate"].Packets - before["source_rate"].Packets
	t.Logf("flooding client: %d of %d connected; other client: %d of %d; source_rate drops %d", flooded.Load(), flood, otherOK.Load(), other, dropped)
	// 5 in the burst, 5 a second for the 0.7 s the dials wait (a retransmitted SYN comes after 1 s).
	if n := flooded.Load(); n > 12 {
		t.Errorf("the flooding client connected %d times of %d: the per-source limit (5/s, burst 5) did not hold", n, flood)
	}
	if otherOK.Load() != other {
		t.Errorf("the other client connected %d times of %d: it was limited by the first's bucket", otherOK.Load(), other)
	}
	if dropped < flood-12 {
		t.Errorf("source_rate counted %d drops, want at least %d", dropped, flood-12)
	}
	keepGet(t, keep, url, "keep-alive request after the flood")
}

// keepGet does a request that must reuse the client's open connection.
func keepGet(t *testing.T, c *http.Client, url, what string) {
	t.Helper()
	reused := false
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !reused {
		t.Errorf("%s: status %d, on the established connection: %v", what, resp.StatusCode, reused)
	}
}
