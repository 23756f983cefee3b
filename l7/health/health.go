// Package health decides which L7 backends are in rotation: active checks poll each backend on a
// timer (rise/fall thresholds), and passive outlier detection ejects a backend after consecutive
// errors seen on real traffic, never ejecting more than a capped share of the pool.
package health

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/l7/balance"
)

// Check configures active health checking.
type Check struct {
	// Path is the HTTP check's path (GET, answered with Expect).
	Path string
	// GRPC checks with the standard gRPC health protocol instead: grpc.health.v1.Health/Check
	// of Service ("" is the whole server) over the pool's HTTP/2 transport; healthy when the
	// answer is SERVING with grpc-status 0.
	GRPC     bool
	Service  string
	Interval time.Duration
	Timeout  time.Duration
	// Rise consecutive successes mark a backend up, Fall consecutive failures mark it down.
	Rise, Fall int
	// Expect is the status a healthy backend answers with.
	Expect int
	// Scheme is "http" or "https".
	Scheme string
	// Local, when set, reports a probe error that is the checker's own resource failure (out of
	// descriptors, memory, local ports): it counts neither for nor against the backend, so a
	// proxy short of descriptors does not mark every healthy backend down.
	Local func(error) bool
}

// Observer is told about health transitions, for metrics and logs.
type Observer func(b *balance.Backend, healthy bool)

// Checker runs active checks for a set of backends until its context ends.
type Checker struct {
	check  Check
	client *http.Client
	notify Observer
}

// NewChecker returns a checker; client carries the transport (TLS settings) of the pool.
func NewChecker(c Check, client *http.Client, notify Observer) *Checker {
	if c.Rise < 1 {
		c.Rise = 1
	}
	if c.Fall < 1 {
		c.Fall = 1
	}
	if c.Expect == 0 {
		c.Expect = http.StatusOK
	}
	if c.Scheme == "" {
		c.Scheme = "http"
	}
	return &Checker{check: c, client: client, notify: notify}
}

// Run checks every backend each interval until ctx is done. It returns when all probes stop.
func (c *Checker) Run(ctx context.Context, backends []*balance.Backend) {
	var wg sync.WaitGroup
	for _, b := range backends {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.loop(ctx, b)
		}()
	}
	wg.Wait()
}

func (c *Checker) loop(ctx context.Context, b *balance.Backend) {
	t := time.NewTicker(c.check.Interval)
	defer t.Stop()
	ok, fail := 0, 0
	for {
		if err := c.Probe(ctx, b); err == nil {
			ok, fail = ok+1, 0
			if !b.Healthy() && ok >= c.check.Rise {
				b.SetHealthy(true)
				c.emit(b, true)
			}
		} else if ctx.Err() == nil && (c.check.Local == nil || !c.check.Local(err)) {
			ok, fail = 0, fail+1
			if b.Healthy() && fail >= c.check.Fall {
				b.SetHealthy(false)
				c.emit(b, false)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Checker) emit(b *balance.Backend, healthy bool) {
	if c.notify != nil {
		c.notify(b, healthy)
	}
}

// Probe performs one check of b.
func (c *Checker) Probe(ctx context.Context, b *balance.Backend) error {
	ctx, cancel := context.WithTimeout(ctx, c.check.Timeout)
	defer cancel()
	if c.check.GRPC {
		return c.probeGRPC(ctx, b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.check.Scheme+"://"+b.Address+c.check.Path, nil)
	if err != nil {
		return fmt.Errorf("build health request: %w", err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", b.Address, err)
	}
	resp.Body.Close()
	if resp.StatusCode != c.check.Expect {
		return fmt.Errorf("probe %s: status %d, want %d", b.Address, resp.StatusCode, c.check.Expect)
	}
	return nil
}

// Outlier configures passive ejection.
type Outlier struct {
	// ConsecutiveErrors ejects a backend after this many errors in a row (0 disables).
	ConsecutiveErrors int
	// EjectionTime is how long an ejected backend stays out.
	EjectionTime time.Duration
	// MaxEjectedPercent caps the share of the pool that may be ejected at once, so a failure
	// that hits every backend (a bad deploy, a dependency down) cannot empty the pool.
	MaxEjectedPercent int
}

// Detector counts consecutive errors per backend of one pool.
type Detector struct {
	cfg      Outlier
	backends []*balance.Backend
	notify   Observer
	mu       sync.Mutex
	errors   map[*balance.Backend]*atomic.Int64
}

// NewDetector returns a detector for a pool's backends.
func NewDetector(cfg Outlier, backends []*balance.Backend, notify Observer) *Detector {
	d := &Detector{cfg: cfg, backends: backends, notify: notify, errors: map[*balance.Backend]*atomic.Int64{}}
	for _, b := range backends {
		d.errors[b] = new(atomic.Int64)
	}
	return d
}

// Success resets b's error streak.
func (d *Detector) Success(b *balance.Backend) {
	if c := d.errors[b]; c != nil && c.Load() != 0 {
		c.Store(0)
	}
}

// Failure records an error from b and reports whether it got ejected.
func (d *Detector) Failure(b *balance.Backend) bool {
	c := d.errors[b]
	if c == nil || d.cfg.ConsecutiveErrors <= 0 {
		return false
	}
	if c.Add(1) < int64(d.cfg.ConsecutiveErrors) {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if b.Ejected() {
		return false
	}
	ejected := 0
	for _, x := range d.backends {
		if x.Ejected() {
			ejected++
		}
	}
	if (ejected+1)*100 > d.cfg.MaxEjectedPercent*len(d.backends) {
		return false
	}
	b.Eject(time.Now().Add(d.cfg.EjectionTime))
	c.Store(0)
	if d.notify != nil {
		d.notify(b, false)
	}
	return true
}
