// Package loadstat is what the bench's Go load generators (bench/h3load, bench/grpcload) share:
// the counts of one bounded run, a latency histogram per worker, and the one line of key=value
// pairs they print (requests, ok, bad, errors, timeouts, rps, p50_ms, p99_ms, elapsed), which
// bench/lib.sh's check_loadgen reads. A run is good only when every request it made was good.
package loadstat

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of a run: every load generator refuses settings outside them (bounded loops only).
const (
	MaxConns       = 256
	MaxConcurrency = 100
	MaxDuration    = time.Minute
	MaxRequests    = 50_000_000
)

// Options are the settings common to the load generators (their flags).
type Options struct {
	Conns       int           // connections (each its own client and socket)
	Concurrency int           // requests in flight on each connection
	Duration    time.Duration // the measured window
	Requests    int64         // at most this many requests in all, warm-up included
	Timeout     time.Duration // one request, start to last byte
}

// Register adds the flags every load generator shares (-c -m -d -n -timeout) to fs; conn and
// call name a connection and a request in their help ("QUIC connections", "calls").
func (o *Options) Register(fs *flag.FlagSet, conn, call string) {
	fs.IntVar(&o.Conns, "c", 16, conn)
	fs.IntVar(&o.Concurrency, "m", 10, call+" in flight per connection")
	fs.DurationVar(&o.Duration, "d", 5*time.Second, "measured window")
	fs.Int64Var(&o.Requests, "n", 10_000_000, "at most this many "+call+" in all")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "deadline of one of the "+call)
}

// Check names what is out of bounds, or returns nil.
func (o Options) Check() error {
	switch {
	case o.Conns < 1 || o.Conns > MaxConns:
		return fmt.Errorf("-c %d: want 1..%d connections", o.Conns, MaxConns)
	case o.Concurrency < 1 || o.Concurrency > MaxConcurrency:
		return fmt.Errorf("-m %d: want 1..%d requests in flight per connection", o.Concurrency, MaxConcurrency)
	case o.Duration <= 0 || o.Duration > MaxDuration:
		return fmt.Errorf("-d %s: want more than 0, up to %s", o.Duration, MaxDuration)
	case o.Requests < 1 || o.Requests > MaxRequests:
		return fmt.Errorf("-n %d: want 1..%d requests", o.Requests, MaxRequests)
	case o.Timeout <= 0 || o.Timeout > MaxDuration:
		return fmt.Errorf("-timeout %s: want more than 0, up to %s", o.Timeout, MaxDuration)
	}
	return nil
}

// Outcome of one request.
type Outcome int

const (
	OK      Outcome = iota
	Bad             // an answer, but not the right one: a status other than 200 / OK, a wrong body length
	Error           // no answer: a connection, stream or protocol error
	Timeout         // no answer within the request's deadline
)

// Classify maps a transport error to Timeout or Error.
func Classify(err error) Outcome {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return Timeout
	}
	return Error
}

// buckets of the latency histogram: bucket i holds latencies up to 1.01^i microseconds, so a
// percentile is exact to 1%; the last bucket holds everything from about 8 minutes up.
const buckets = 2048

var bucketBase = math.Log(1.01)

func bucketOf(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us <= 1 {
		return 0
	}
	i := int(math.Ceil(math.Log(us) / bucketBase))
	if i >= buckets {
		i = buckets - 1
	}
	return i
}

// Hist is one worker's latency histogram (no locking: merge them at the end).
type Hist [buckets]int64

// Add records one latency.
func (h *Hist) Add(d time.Duration) { h[bucketOf(d)]++ }

// Merge adds o into h.
func (h *Hist) Merge(o *Hist) {
	for i, v := range o {
		h[i] += v
	}
}

// Quantile returns the latency below which a fraction q of the recorded ones lie (the bucket's
// upper bound), 0 when none was recorded.
func (h *Hist) Quantile(q float64) time.Duration {
	var n int64
	for _, v := range h {
		n += v
	}
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	if rank < 1 {
		rank = 1
	}
	var seen int64
	for i, v := range h {
		seen += v
		if seen >= rank {
			return time.Duration(math.Pow(1.01, float64(i)) * float64(time.Microsecond))
		}
	}
	return 0
}

// Run is one run's counts, shared by every worker.
type Run struct {
	opts                    Options
	started                 atomic.Int64 // requests reserved against opts.Requests
	ok, bad, errs, timeouts atomic.Int64
	// inWindow counts the good requests that completed within the measured window.
	inWindow atomic.Int64
	first    atomic.Pointer[string]
	mu       sync.Mutex
	hist     Hist
	start    time.Time
	end      atomic.Int64 // unix nanos when the window closed early (the request budget ran out)
	deadline time.Time
}

// NewRun starts nothing; Start begins the measured window.
func NewRun(o Options) *Run { return &Run{opts: o} }

// Take reserves one request of the budget; false when the budget is spent.
func (r *Run) Take() bool { return r.started.Add(1) <= r.opts.Requests }

// Start opens the measured window: it lasts opts.Duration, or until the request budget is spent.
func (r *Run) Start() {
	r.start = time.Now()
	r.deadline = r.start.Add(r.opts.Duration)
}

// Open is true while the window is open: workers start no request after it closed.
func (r *Run) Open() bool {
	if time.Now().After(r.deadline) {
		return false
	}
	if !r.Take() {
		r.end.CompareAndSwap(0, time.Now().UnixNano())
		return false
	}
	return true
}

// Done records one request's outcome and, when good, its latency into the worker's histogram;
// what names the failure (kept for the message when it is the first).
func (r *Run) Done(h *Hist, o Outcome, lat time.Duration, what string) {
	switch o {
	case OK:
		r.ok.Add(1)
		h.Add(lat)
		if time.Now().Before(r.deadline) {
			r.inWindow.Add(1)
		}
		return
	case Bad:
		r.bad.Add(1)
	case Timeout:
		r.timeouts.Add(1)
	default:
		r.errs.Add(1)
	}
	r.first.CompareAndSwap(nil, &what)
}

// Merge adds a worker's histogram to the run's (once, when the worker is done).
func (r *Run) Merge(h *Hist) {
	r.mu.Lock()
	r.hist.Merge(h)
	r.mu.Unlock()
}

// Line is the run as key=value pairs (then extra ones, e.g. the negotiated protocol): the rate
// is the good requests completed within the window, per second of the window.
func (r *Run) Line(extra ...string) string {
	window := r.opts.Duration
	if e := r.end.Load(); e != 0 {
		window = time.Duration(e - r.start.UnixNano())
	}
	var elapsed time.Duration
	if !r.start.IsZero() {
		elapsed = time.Since(r.start)
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }
	fields := []string{
		fmt.Sprintf("requests=%d", r.ok.Load()+r.bad.Load()+r.errs.Load()+r.timeouts.Load()),
		fmt.Sprintf("ok=%d", r.ok.Load()),
		fmt.Sprintf("bad=%d", r.bad.Load()),
		fmt.Sprintf("errors=%d", r.errs.Load()),
		fmt.Sprintf("timeouts=%d", r.timeouts.Load()),
		fmt.Sprintf("rps=%.1f", float64(r.inWindow.Load())/window.Seconds()),
		"p50_ms=" + ms(r.hist.Quantile(0.50)),
		"p99_ms=" + ms(r.hist.Quantile(0.99)),
		fmt.Sprintf("elapsed=%.2fs", elapsed.Seconds()),
	}
	return strings.Join(append(fields, extra...), " ")
}

// Verdict is nil when every request was good and at least one completed.
func (r *Run) Verdict() error {
	n := r.ok.Load() + r.bad.Load() + r.errs.Load() + r.timeouts.Load()
	if failed := n - r.ok.Load(); failed > 0 {
		return fmt.Errorf("%d of %d requests failed (%d bad answers, %d errors, %d timeouts); first: %s",
			failed, n, r.bad.Load(), r.errs.Load(), r.timeouts.Load(), *r.first.Load())
	}
	if r.ok.Load() == 0 {
		return errors.New("no request completed")
	}
	return nil
}

// Exit prints the line and exits 1, naming what went wrong, unless the run was good.
func (r *Run) Exit(name string, extra ...string) {
	fmt.Println(r.Line(extra...))
	if err := r.Verdict(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Drive runs the load over conns connections: first one checked request on each, before the
// window opens (handshakes are not timed), then, unless one failed, Concurrency loops per
// connection making requests until the window or the count ends. do(i) makes one request on
// connection i and says how it went.
func (r *Run) Drive(conns int, do func(conn int) (Outcome, string)) {
	if !r.warm(conns, do) {
		return
	}
	var wg sync.WaitGroup
	r.Start()
	for i := range conns {
		for range r.opts.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var h Hist
				for r.Open() {
					t0 := time.Now()
					out, what := do(i)
					r.Done(&h, out, time.Since(t0), what)
				}
				r.Merge(&h)
			}()
		}
	}
	wg.Wait()
}

// warm makes one checked, untimed request on each of conns connections (handshakes and first
// answers are not measured) and reports whether all were good.
func (r *Run) warm(conns int, do func(conn int) (Outcome, string)) bool {
	var h Hist
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r.Take() {
				out, what := do(i)
				r.Done(&h, out, 0, what)
			}
		}()
	}
	wg.Wait()
	return r.Verdict() == nil
}

// Pace runs the load at a fixed offered rate instead of as fast as answers come: after the
// warm-up of Drive, request k is due at rate per second from the window's start and goes out on
// the next free connection (one request at a time on each), until the window or the count ends.
// Its latency counts from when it was released, not from when a connection was free, so answers
// that stall (every connection waiting) show in the percentiles with the backlog they caused
// instead of slowing the load down (coordinated omission). Released is when it was due or, when
// the generator itself woke late (Go's timers sleep at least a millisecond on an idle P, and the
// generator shares the cores), when it woke: the generator's lateness is not the server's, and
// counting it put a floor of about a millisecond under every server's p99 alike.
func (r *Run) Pace(conns int, rate float64, do func(conn int) (Outcome, string)) {
	if !r.warm(conns, do) {
		return
	}
	// The queue holds every request the window can release, so the pacer never waits for a
	// connection: a request waiting in it keeps the time it was released.
	queue := min(r.opts.Requests, int64(rate*r.opts.Duration.Seconds())+int64(conns), 1<<22)
	due := make(chan time.Time, queue)
	var wg sync.WaitGroup
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var h Hist
			for t := range due {
				if time.Since(t) > r.opts.Timeout {
					r.Done(&h, Timeout, 0, "a request waited longer than -timeout for a free connection: the server fell behind the rate")
					continue
				}
				out, what := do(i)
				r.Done(&h, out, time.Since(t), what)
			}
			r.Merge(&h)
		}()
	}
	r.Start()
	every := time.Duration(float64(time.Second) / rate)
	for k := time.Duration(0); ; k++ {
		t := r.start.Add(k * every)
		time.Sleep(time.Until(t))
		if !r.Open() {
			break
		}
		if now := time.Now(); now.After(t) {
			t = now
		}
		due <- t
	}
	close(due)
	wg.Wait()
}
