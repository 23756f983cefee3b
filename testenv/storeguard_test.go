package testenv

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
)

// TestFleetGlobalGuardThroughStore: a global deny rule set with `switchyard guard add` on one
// node of a fleet travels through the store and is enforced by both nodes (new connections from
// the denied client fail whichever node ECMP picks, both count deny drops) while a connection
// established before goes on. An overlapping prefix through the CLI is refused; an overlapping
// guard written into the store by hand is refused by both nodes, naming the key, and the running
// rule stays; a change through the other node's CLI replaces it and both nodes follow.
func TestFleetGlobalGuardThroughStore(t *testing.T) {
	f := newFleetLab(t, 1, 2, true)
	client := f.Lab().Client(1)
	deny := netip.PrefixFrom(client.Addr4, 32).String()
	web := net.JoinHostPort(lab.WebVIP4.String(), "80")
	before := f.keepAlive()
	const tries = 12
	if n := f.connects(client.NS, web, tries); n != tries {
		t.Fatalf("%d of %d connections before any rule", n, tries)
	}

	out, err := f.cli(0, "guard", "add", "deny", deny)
	if err != nil || !strings.Contains(out, "saved to etcds://") {
		t.Fatalf("guard add deny %s on lb1: %v: %s", deny, err, out)
	}
	for i := range 2 {
		testutil.Eventually(t, 10*time.Second, func() bool { return f.globalDeny(i, deny) }, "lb%d has not the global deny rule", i+1)
	}
	drops0 := []uint64{f.guardCounter(0, "deny"), f.guardCounter(1, "deny")}
	if n := f.connects(client.NS, web, tries); n != 0 {
		t.Errorf("%d of %d connections from a denied source got through", n, tries)
	}
	for i := range 2 {
		if d := f.guardCounter(i, "deny") - drops0[i]; d == 0 {
			t.Errorf("lb%d dropped nothing for the global deny rule (ECMP spread %d connections over both)", i+1, tries)
		}
	}
	if _, err := before.do("/during"); err != nil {
		t.Errorf("a connection established before the deny rule broke: %v", err)
	}

	// Bad input through the CLI: refused, nothing written.
	wide := netip.PrefixFrom(client.Addr4, 24).Masked().String()
	if out, err := f.cli(1, "guard", "add", "deny", wide); err == nil || !strings.Contains(out, "overlaps "+deny) {
		t.Errorf("an overlapping deny through the CLI: %v: %s", err, out)
	}
	// Bad value in the store: refused by both nodes, the running rule stays.
	s, err := lab.OpenStore(f.State)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.Client().Put(ctx, s.GuardKey(), "deny: ["+wide+", "+deny+"]"); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		testutil.Eventually(t, 10*time.Second, func() bool {
			r := f.status(i).Store.Refused
			return strings.Contains(r, "store key "+s.GuardKey()) && strings.Contains(r, "overlaps")
		}, "lb%d did not refuse the bad guard: %+v", i+1, func() any { return f.status(i).Store })
		if !f.globalDeny(i, deny) {
			t.Errorf("lb%d lost its running rule to a bad guard in the store", i+1)
		}
	}
	t.Logf("refused: %s", f.status(0).Store.Refused)
	if n := f.connects(client.NS, web, tries); n != 0 {
		t.Errorf("%d of %d connections got through after a bad guard in the store", n, tries)
	}

	// Replaced through lb2: both nodes take the new rule and let the client in again.
	other := "203.0.113.0/24"
	if out, err := f.cli(1, "guard", "add", "deny", other); err != nil {
		t.Fatalf("guard add deny %s on lb2: %v: %s", other, err, out)
	}
	for i := range 2 {
		testutil.Eventually(t, 10*time.Second, func() bool {
			return f.globalDeny(i, other) && !f.globalDeny(i, deny) && f.status(i).Store.Refused == ""
		},
			"lb%d did not take the replaced guard", i+1)
	}
	if n := f.connects(client.NS, web, tries); n != tries {
		t.Errorf("%d of %d connections once the deny rule was replaced", n, tries)
	}
}

// connects dials n connections at once from ns to addr (700 ms each) and counts those made.
func (f *fleetLab) connects(ns, addr string, n int) int {
	var ok atomic.Int32
	var wg sync.WaitGroup
	dial := namednetns.Dialer(ns, &net.Dialer{Timeout: 700 * time.Millisecond})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c, err := dial(context.Background(), "tcp", addr); err == nil {
				ok.Add(1)
				c.Close()
			}
		}()
	}
	wg.Wait()
	return int(ok.Load())
}

// guard is balancer i's `guard list`.
func (f *fleetLab) guard(i int) api.GuardInfo {
	f.t.Helper()
	var g api.GuardInfo
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := api.NewClient(f.socks[i]).Call(ctx, api.OpGuardList, api.Empty{}, &g); err != nil {
		f.t.Fatalf("lb%d guard list: %v", i+1, err)
	}
	return g
}

// globalDeny reports whether balancer i's global guard denies prefix.
func (f *fleetLab) globalDeny(i int, prefix string) bool {
	g := f.guard(i).Global
	return g != nil && slices.Contains(g.Deny, prefix)
}

func (f *fleetLab) guardCounter(i int, name string) uint64 { return f.guard(i).Counters[name].Packets }
