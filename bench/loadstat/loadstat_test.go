package loadstat

import (
	"strings"
	"testing"
	"time"
)

// Percentiles are within 1% of the true value.
func TestQuantile(t *testing.T) {
	var h Hist
	for i := 1; i <= 1000; i++ {
		h.Add(time.Duration(i) * time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Millisecond, 0.99: 990 * time.Millisecond} {
		got := h.Quantile(q)
		if got < want || float64(got) > float64(want)*1.0101 {
			t.Errorf("quantile %.2f: %s, want %s within 1%%", q, got, want)
		}
	}
	var empty Hist
	if empty.Quantile(0.99) != 0 {
		t.Error("an empty histogram has a p99")
	}
}

// One failed request fails the run, whatever the number of good ones; none at all fails it too.
func TestVerdict(t *testing.T) {
	r := NewRun(Options{Conns: 1, Concurrency: 1, Duration: time.Second, Requests: 100, Timeout: time.Second})
	r.Start()
	var h Hist
	if r.Verdict() == nil {
		t.Fatal("a run with no request passed")
	}
	for range 10 {
		r.Done(&h, OK, time.Millisecond, "")
	}
	if err := r.Verdict(); err != nil {
		t.Fatal(err)
	}
	r.Done(&h, Bad, 0, "status 503")
	if err := r.Verdict(); err == nil || !strings.Contains(err.Error(), "status 503") {
		t.Fatalf("verdict %v, want a failure naming status 503", err)
	}
	if !strings.HasPrefix(r.Line(), "requests=11 ok=10 bad=1 errors=0 timeouts=0 ") {
		t.Fatalf("line %q", r.Line())
	}
}

// Out-of-bounds settings are refused.
func TestCheck(t *testing.T) {
	good := Options{Conns: 16, Concurrency: 10, Duration: 5 * time.Second, Requests: 1000, Timeout: time.Second}
	if err := good.Check(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{
		{Conns: 0, Concurrency: 10, Duration: time.Second, Requests: 1, Timeout: time.Second},
		{Conns: 1, Concurrency: 101, Duration: time.Second, Requests: 1, Timeout: time.Second},
		{Conns: 1, Concurrency: 1, Duration: 2 * time.Minute, Requests: 1, Timeout: time.Second},
		{Conns: 1, Concurrency: 1, Duration: time.Second, Requests: 0, Timeout: time.Second},
	} {
		if o.Check() == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// Pace offers the rate asked, whatever the answers' speed, and counts a request's latency from
// when it was released: with one connection whose answers take 20 ms, requests due every 5 ms wait
// behind each other, and the wait shows in the percentiles.
func TestPace(t *testing.T) {
	o := Options{Conns: 1, Concurrency: 1, Duration: 400 * time.Millisecond, Requests: 1000, Timeout: time.Second}
	r := NewRun(o)
	r.Pace(1, 200, func(int) (Outcome, string) { return OK, "" })
	if n := r.ok.Load() - 1; n < 60 || n > 81 {
		t.Fatalf("%d requests in 400 ms at 200 a second, want about 80", n)
	}
	r = NewRun(o)
	r.Pace(1, 200, func(int) (Outcome, string) { time.Sleep(20 * time.Millisecond); return OK, "" })
	if p99 := r.hist.Quantile(0.99); p99 < 100*time.Millisecond {
		t.Fatalf("p99 %s with answers of 20 ms due every 5 ms on one connection: the backlog is not counted", p99)
	}
}

// A request that waits for a free connection longer than the timeout is a timeout, and the run
// fails: the backlog of a server that fell behind the rate is bounded by the timeout, not drained.
func TestPaceBacklogTimesOut(t *testing.T) {
	o := Options{Conns: 1, Concurrency: 1, Duration: 300 * time.Millisecond, Requests: 1000, Timeout: 100 * time.Millisecond}
	r := NewRun(o)
	start := time.Now()
	r.Pace(1, 200, func(int) (Outcome, string) { time.Sleep(20 * time.Millisecond); return OK, "" })
	if r.timeouts.Load() == 0 || r.Verdict() == nil {
		t.Fatalf("%d timeouts, verdict %v: want the requests queued past the timeout counted as timeouts", r.timeouts.Load(), r.Verdict())
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the run took %s: the backlog was drained instead of timed out", took)
	}
}
