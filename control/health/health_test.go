package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

func TestMachineRiseFall(t *testing.T) {
	now := time.Unix(0, 0)
	m := NewMachine(2, 3, now)
	fail := errors.New("refused")
	if !m.Status().Healthy {
		t.Fatal("a new backend must start healthy (a restart must not empty rings)")
	}
	steps := []struct {
		err     error
		healthy bool
		changed bool
	}{
		{fail, true, false}, {fail, true, false}, {nil, true, false}, // a success resets the fall count
		{fail, true, false}, {fail, true, false}, {fail, false, true}, // 3 in a row: down
		{fail, false, false}, {nil, false, false}, {fail, false, false}, // a failure resets the rise count
		{nil, false, false}, {nil, true, true}, // 2 in a row: up
	}
	for i, s := range steps {
		ch := m.Observe(s.err, now)
		if ch != s.changed || m.Status().Healthy != s.healthy {
			t.Fatalf("step %d: changed %v healthy %v, want %v %v", i, ch, m.Status().Healthy, s.changed, s.healthy)
		}
	}
	if m.Status().LastError != "" || !m.Status().Checked {
		t.Errorf("status after success: %+v", m.Status())
	}
}

func listen(t *testing.T) (net.Listener, netip.AddrPort) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, netip.MustParseAddrPort(ln.Addr().String())
}

func TestProbeTCP(t *testing.T) {
	ln, ap := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	s := Spec{Type: "tcp", Addr: ap, Timeout: time.Second}
	if err := Probe(context.Background(), s); err != nil {
		t.Fatalf("probe of a listening port: %v", err)
	}
	ln.Close()
	if err := Probe(context.Background(), s); err == nil {
		t.Fatal("probe of a closed port succeeded")
	}
}

func TestProbeHTTP(t *testing.T) {
	var status atomic.Int32
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" {
			w.WriteHeader(404)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	defer srv.Close()
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	s := Spec{Type: "http", Addr: ap, Path: "/health", ExpectStatus: 200, Timeout: time.Second}
	if err := Probe(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	status.Store(503)
	if err := Probe(context.Background(), s); err == nil || err.Error() == "" {
		t.Fatal("503 counted healthy")
	}
	s.Path = "/other"
	status.Store(200)
	if err := Probe(context.Background(), s); err == nil {
		t.Fatal("404 counted healthy")
	}
}

// TestManagerFollowsARealServer stops and restarts a real listener and expects one change each way.
func TestManagerFollowsARealServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mg := NewManager(ctx)
	defer mg.Stop()
	ln, ap := listen(t)
	serve := func(ln net.Listener) {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}
	go serve(ln)
	k := Key{VIP: "web", Backend: ap.Addr()}
	mg.Sync(map[Key]Spec{k: {Type: "tcp", Addr: ap, Interval: 20 * time.Millisecond, Timeout: 50 * time.Millisecond, Rise: 2, Fall: 2}})
	wait := func(healthy bool) {
		t.Helper()
		select {
		case ch := <-mg.Changes():
			if ch.Key != k || ch.Healthy != healthy {
				t.Fatalf("change %+v, want healthy=%v", ch, healthy)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("no change to healthy=%v", healthy)
		}
	}
	ln.Close()
	wait(false)
	if mg.Healthy(k) {
		t.Fatal("Healthy disagrees with the change")
	}
	ln2, err := net.Listen("tcp", ap.String())
	if err != nil {
		t.Skipf("port %s taken again meanwhile: %v", ap, err)
	}
	defer ln2.Close()
	go serve(ln2)
	wait(true)
	ok, fail := mg.ProbeCounts()
	if ok < 2 || fail < 2 {
		t.Errorf("probe counts ok %d fail %d", ok, fail)
	}
	// Removing the check stops it; an unchecked backend is healthy.
	mg.Sync(nil)
	if _, checked := mg.Status(k); checked || !mg.Healthy(k) {
		t.Error("check still present after Sync(nil)")
	}
}

// TestTunnelProbeDialsTheVIP: a tunnel probe connects to its target (the VIP) with its mark,
// bound to its device, not to the backend's own address; a direct probe does the opposite. The
// target here is a listener on loopback and the "backend" a closed port, so each mode passes only
// if it dials what it should. The encapsulation itself is tested in loader and testenv.
func TestTunnelProbeDialsTheVIP(t *testing.T) {
	testutil.RequireRoot(t) // SO_MARK needs CAP_NET_ADMIN
	var seen atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		if r.Host == "" {
			w.WriteHeader(500)
		}
	}))
	defer srv.Close()
	vip := netip.MustParseAddrPort(srv.Listener.Addr().String())
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	backend := netip.MustParseAddrPort(closed.Addr().String())
	closed.Close()
	for _, typ := range []string{"tcp", "http"} {
		s := Spec{Type: typ, Addr: backend, Path: "/", ExpectStatus: 200, Timeout: time.Second}
		if typ == "tcp" {
			s.Path, s.ExpectStatus = "", 0
		}
		if err := Probe(context.Background(), s); err == nil {
			t.Errorf("%s direct probe of a closed port passed", typ)
		}
		s.Mode, s.Target, s.Mark, s.Device = ModeTunnel, vip, 0x53590001, "lo"
		if err := Probe(context.Background(), s); err != nil {
			t.Errorf("%s tunnel probe of the VIP: %v", typ, err)
		}
		if d := s.Describe(); !strings.Contains(d, vip.String()) || !strings.Contains(d, "via "+backend.Addr().String()) {
			t.Errorf("describe %q: want the VIP and the backend it goes through", d)
		}
		s.Device = "no-such-if0"
		if err := Probe(context.Background(), s); err == nil || !strings.Contains(err.Error(), "bind to no-such-if0") {
			t.Errorf("%s tunnel probe through a missing device: %v, want a bind error", typ, err)
		}
	}
	if seen.Load() == 0 {
		t.Error("the http tunnel probe never reached the VIP")
	}
}
