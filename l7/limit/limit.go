// Package limit holds the L7 proxy's admission controls: in-flight gates that shed instead of
// queueing, per-client token buckets, and retry budgets that keep retries from multiplying load
// during an outage.
package limit

import (
	"sync"
	"sync/atomic"
	"time"
)

// Gate bounds concurrent work. A full gate refuses at once: a request waiting in an unbounded
// queue only adds latency to every request behind it, while a refusal lets the client back off.
type Gate struct {
	max int64
	cur atomic.Int64
}

// NewGate returns a gate admitting max concurrent holders; max <= 0 means unlimited.
func NewGate(max int) *Gate { return &Gate{max: int64(max)} }

// TryAcquire admits one holder, or reports false when the gate is full.
func (g *Gate) TryAcquire() bool {
	if g == nil {
		return true
	}
	n := g.cur.Add(1)
	if g.max > 0 && n > g.max {
		g.cur.Add(-1)
		return false
	}
	return true
}

// Release ends a holder admitted by TryAcquire.
func (g *Gate) Release() {
	if g != nil {
		g.cur.Add(-1)
	}
}

// InFlight returns the number of current holders.
func (g *Gate) InFlight() int64 {
	if g == nil {
		return 0
	}
	return g.cur.Load()
}

// Buckets is a set of token buckets keyed by client: each key may spend Burst requests at once
// and gets Rate tokens back per second. Idle keys are forgotten so memory tracks active clients.
type Buckets struct {
	rate  float64
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// NewBuckets returns a keyed token-bucket limiter. burst < 1 is raised to 1.
func NewBuckets(rate float64, burst int) *Buckets {
	if burst < 1 {
		burst = 1
	}
	return &Buckets{rate: rate, burst: float64(burst), now: time.Now, buckets: map[string]*bucket{}}
}

// Allow spends one token of key, reporting false when the bucket is empty.
func (l *Buckets) Allow(key string) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now)
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[key] = b
	}
	b.tokens += now.Sub(b.last).Seconds() * l.rate
	if b.tokens > l.burst {
		b.tokens = l.burst
	}
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// RetryAfter is how long an empty bucket takes to earn one token, for the Retry-After header.
func (l *Buckets) RetryAfter() time.Duration {
	if l.rate <= 0 {
		return time.Second
	}
	return time.Duration(float64(time.Second) / l.rate)
}

// sweep drops buckets that are full again (idle long enough to refill), at most once a minute.
func (l *Buckets) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Minute {
		return
	}
	l.swept = now
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst {
			delete(l.buckets, k)
		}
	}
}

// Len is the number of tracked keys.
func (l *Buckets) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// RetryBudget allows retries up to Percent of the requests seen in the last second, but at least
// MinPerSecond, the way Envoy's and Linkerd's budgets work: when every backend fails, retries
// stop adding a multiple of the load to a system that is already down.
type RetryBudget struct {
	percent float64
	minimum float64
	now     func() time.Time

	mu       sync.Mutex
	window   int64 // unix second of the current window
	requests [2]float64
	retries  [2]float64
}

// NewRetryBudget returns a budget; percent is 0-100.
func NewRetryBudget(percent float64, minPerSecond int) *RetryBudget {
	return &RetryBudget{percent: percent, minimum: float64(minPerSecond), now: time.Now}
}

// roll moves the two one-second windows forward to now.
func (b *RetryBudget) roll() {
	sec := b.now().Unix()
	switch d := sec - b.window; {
	case d == 0:
	case d == 1:
		b.requests[1], b.retries[1] = b.requests[0], b.retries[0]
		b.requests[0], b.retries[0] = 0, 0
	default:
		b.requests = [2]float64{}
		b.retries = [2]float64{}
	}
	b.window = sec
}

// Request records one original request.
func (b *RetryBudget) Request() {
	b.mu.Lock()
	b.roll()
	b.requests[0]++
	b.mu.Unlock()
}

// TryRetry spends one retry if the budget allows it.
func (b *RetryBudget) TryRetry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.roll()
	// The window is the current second plus the previous one, so the allowance does not collapse
	// to the minimum at every second boundary.
	allowed := (b.requests[0] + b.requests[1]) * b.percent / 100
	if allowed < b.minimum {
		allowed = b.minimum
	}
	if b.retries[0]+b.retries[1]+1 > allowed {
		return false
	}
	b.retries[0]++
	return true
}
