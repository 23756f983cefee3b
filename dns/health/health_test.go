package health

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/dns/config"
)

func TestRiseFallOnRealTargets(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	var status atomic.Int32
	status.Store(http.StatusOK)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(int(status.Load())) }))
	defer hs.Close()
	chk := func(typ, target string) config.Check {
		return config.Check{Type: typ, Target: target, Path: "/", Timeout: config.Duration(200 * time.Millisecond),
			Interval: config.Duration(time.Second), Rise: 2, Fall: 3}
	}
	var mu sync.Mutex
	var changes []string
	c := New(map[string]config.Check{"n/tcp": chk("tcp", ln.Addr().String()), "n/http": chk("http", hs.Listener.Addr().String())},
		nil, func(k string, up bool) {
			mu.Lock()
			changes = append(changes, k)
			mu.Unlock()
		})
	ctx := context.Background()
	c.Round(ctx)
	if !c.Up("n/tcp") || !c.Up("n/http") || c.RTT("n/tcp") <= 0 {
		t.Fatal("targets not up with a measured RTT")
	}
	ln.Close()
	status.Store(http.StatusServiceUnavailable)
	for i := 1; i <= 3; i++ {
		c.Round(ctx)
		if want := i < 3; c.Up("n/tcp") != want || c.Up("n/http") != want {
			t.Fatalf("after %d failures up=%v/%v, want %v (fall 3)", i, c.Up("n/tcp"), c.Up("n/http"), want)
		}
	}
	status.Store(http.StatusOK)
	c.Round(ctx)
	if c.Up("n/http") {
		t.Fatal("up after one success, rise is 2")
	}
	c.Round(ctx)
	if !c.Up("n/http") {
		t.Fatal("not up after two successes")
	}
	// A reload keeps the state of unchanged checks: the dead TCP target stays down.
	next := New(map[string]config.Check{"n/tcp": chk("tcp", ln.Addr().String())}, c, nil)
	if next.Up("n/tcp") {
		t.Fatal("reload reset a dead target to up")
	}
	if len(changes) != 3 {
		t.Fatalf("transitions %v, want 3", changes)
	}
}
