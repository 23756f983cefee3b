package health

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/l7/balance"
)

func TestCheckerRiseAndFall(t *testing.T) {
	var status, probes, failed atomic.Int64
	status.Store(200)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/hc" {
			w.WriteHeader(404)
			return
		}
		probes.Add(1)
		code := int(status.Load())
		if code != 200 {
			failed.Add(1)
		}
		w.WriteHeader(code)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	b := balance.NewBackend(ln.Addr().String(), 1)
	var transitions atomic.Int64
	c := NewChecker(Check{Path: "/hc", Interval: 20 * time.Millisecond, Timeout: 15 * time.Millisecond, Rise: 2, Fall: 3, Expect: 200},
		&http.Client{}, func(*balance.Backend, bool) { transitions.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx, []*balance.Backend{b}); close(done) }()
	defer func() { cancel(); <-done }()

	// More good probes than fall: a checker that marked a healthy backend down would have by now.
	testutil.Eventually(t, 3*time.Second, func() bool { return probes.Load() >= 5 }, "the checker sent no 5 probes")
	if !b.Healthy() || transitions.Load() != 0 {
		t.Fatal("healthy backend marked down")
	}
	status.Store(503)
	testutil.Eventually(t, 3*time.Second, func() bool { return !b.Healthy() }, "the backend was not marked down")
	// Count failed probes, not time: a late tick makes the next one early, so fall 3 can take
	// less than two intervals of wall time (38.8 ms seen on a loaded CI run).
	if n := failed.Load(); n < 3 {
		t.Errorf("marked down after %d failed probes; fall 3 needs 3", n)
	}
	status.Store(200)
	testutil.Eventually(t, 3*time.Second, func() bool { return b.Healthy() }, "the backend did not come back up")
	if transitions.Load() != 2 {
		t.Errorf("%d transitions, want 2", transitions.Load())
	}
	// A dead address fails the probe.
	dead := balance.NewBackend("127.0.0.1:1", 1)
	if err := c.Probe(context.Background(), dead); err == nil {
		t.Error("probe of a closed port succeeded")
	}
}

func TestDetectorEjectsWithCap(t *testing.T) {
	bs := []*balance.Backend{balance.NewBackend("a:1", 1), balance.NewBackend("b:1", 1), balance.NewBackend("c:1", 1), balance.NewBackend("d:1", 1)}
	d := NewDetector(Outlier{ConsecutiveErrors: 3, EjectionTime: time.Minute, MaxEjectedPercent: 50}, bs, nil)
	// Errors interrupted by a success do not eject.
	d.Failure(bs[0])
	d.Failure(bs[0])
	d.Success(bs[0])
	d.Failure(bs[0])
	if bs[0].Ejected() {
		t.Fatal("ejected without 3 consecutive errors")
	}
	for _, b := range bs {
		for i := 0; i < 3; i++ {
			d.Failure(b)
		}
	}
	n := 0
	for _, b := range bs {
		if b.Ejected() {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d of 4 ejected, want 2 (50%% cap)", n)
	}
	short := NewDetector(Outlier{ConsecutiveErrors: 1, EjectionTime: 30 * time.Millisecond, MaxEjectedPercent: 100}, bs[3:], nil)
	bs[3].Eject(time.Time{})
	short.Failure(bs[3])
	if !bs[3].Ejected() {
		t.Fatal("not ejected")
	}
	testutil.Eventually(t, 3*time.Second, func() bool { return !bs[3].Ejected() }, "ejection (30 ms) did not expire")
}

// A probe error the Local classifier calls the checker's own (out of descriptors and the like)
// counts neither way: the backend stays up however many probes fail so; other errors still
// mark it down.
func TestCheckerIgnoresLocalFailures(t *testing.T) {
	dead := "127.0.0.1:1" // a closed port: every probe fails
	for _, local := range []bool{true, false} {
		b := balance.NewBackend(dead, 1)
		c := NewChecker(Check{Path: "/", Interval: 10 * time.Millisecond, Timeout: 10 * time.Millisecond, Rise: 1, Fall: 2,
			Local: func(error) bool { return local }}, &http.Client{}, nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx, []*balance.Backend{b}); close(done) }()
		time.Sleep(150 * time.Millisecond)
		cancel()
		<-done
		if b.Healthy() != local {
			t.Errorf("local=%v: healthy=%v after 15 failed probes", local, b.Healthy())
		}
	}
}
