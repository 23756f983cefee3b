// Package health probes the targets behind the DNS stop's sites (TCP connect or HTTP status) and
// keeps an up/down state per site with rise/fall hysteresis: a dead site leaves the answers
// after fall consecutive failures (fall x interval) and comes back after rise successes.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/dns/config"
)

// Checker holds the state of every probed target. Up is lock-free because the query path reads
// it for every dynamic answer.
type Checker struct {
	states   map[string]*state // immutable after New; keys are "name/site"
	onChange func(key string, up bool)
	client   *http.Client
	// localErrors counts probes that failed for a local reason (see IsLocal); carried over
	// from the previous checker on reload.
	localErrors atomic.Uint64
	// OnLocalError, when set before Run or Round, is called for every probe that failed for a
	// local reason; the probe counts neither for nor against the target.
	OnLocalError func(key string, err error)
}

type state struct {
	check     config.Check
	up        atomic.Bool
	rttNanos  atomic.Int64
	mu        sync.Mutex // serialises result application for this target
	successes int
	failures  int
}

// New builds a checker for targets (key -> check). States of keys whose check is unchanged are
// carried over from prev (may be nil), so a reload does not reset a dead site to up. Targets
// start up: a new name should answer at once, and a dead target leaves after fall probes.
// onChange (may be nil) is called on every transition.
func New(targets map[string]config.Check, prev *Checker, onChange func(key string, up bool)) *Checker {
	c := &Checker{
		states:   map[string]*state{},
		onChange: onChange,
		// No keep-alive: every probe must prove the target still accepts connections.
		client: &http.Client{Transport: &http.Transport{DisableKeepAlives: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
	if prev != nil {
		c.localErrors.Store(prev.localErrors.Load())
	}
	for k, chk := range targets {
		s := &state{check: chk}
		s.up.Store(true)
		if prev != nil {
			if old, ok := prev.states[k]; ok && old.check == chk {
				s.up.Store(old.up.Load())
				s.rttNanos.Store(old.rttNanos.Load())
				old.mu.Lock()
				s.successes, s.failures = old.successes, old.failures
				old.mu.Unlock()
			}
		}
		c.states[k] = s
	}
	return c
}

// Up reports whether key is up; keys without a check are always up.
func (c *Checker) Up(key string) bool {
	if c == nil {
		return true
	}
	s, ok := c.states[key]
	return !ok || s.up.Load()
}

// RTT returns the last successful probe's round trip, or 0 when unknown.
func (c *Checker) RTT(key string) time.Duration {
	if c == nil {
		return 0
	}
	if s, ok := c.states[key]; ok {
		return time.Duration(s.rttNanos.Load())
	}
	return 0
}

// Keys returns the checked keys, sorted.
func (c *Checker) Keys() []string {
	out := make([]string, 0, len(c.states))
	for k := range c.states {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Round probes every target once, concurrently, and applies the results. Run calls it per target
// on a ticker; a caller that keeps its own clock (the dns-failover experiment, docs/lab.md) calls
// it once per tick of that clock.
func (c *Checker) Round(ctx context.Context) {
	var wg sync.WaitGroup
	for k, s := range c.states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.probeAndApply(ctx, k, s)
		}()
	}
	wg.Wait()
}

// Run probes each target at its own interval until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for k, s := range c.states {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Duration(s.check.Interval))
			defer t.Stop()
			for {
				c.probeAndApply(ctx, k, s)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	wg.Wait()
}

func (c *Checker) probeAndApply(ctx context.Context, key string, s *state) {
	rtt, err := Probe(ctx, c.client, s.check)
	if ctx.Err() != nil {
		return // shutting down: a cancelled probe says nothing about the target
	}
	if err != nil && IsLocal(err) {
		// Out of descriptors, memory or local ports: the probe never reached the target, so it
		// says nothing about it. Counting it would fail healthy sites over (a soak did: 18 s).
		c.localErrors.Add(1)
		if c.OnLocalError != nil {
			c.OnLocalError(key, err)
		}
		return
	}
	s.mu.Lock()
	changed := false
	if err == nil {
		s.rttNanos.Store(int64(rtt))
		s.failures = 0
		s.successes++
		if !s.up.Load() && s.successes >= s.check.Rise {
			s.up.Store(true)
			changed = true
		}
	} else {
		s.successes = 0
		s.failures++
		if s.up.Load() && s.failures >= s.check.Fall {
			s.up.Store(false)
			changed = true
		}
	}
	up := s.up.Load()
	s.mu.Unlock()
	if changed && c.onChange != nil {
		c.onChange(key, up)
	}
}

// LocalErrors returns how many probes failed for a local reason.
func (c *Checker) LocalErrors() uint64 {
	if c == nil {
		return 0
	}
	return c.localErrors.Load()
}

// IsLocal reports whether a probe error is a shortage on this machine rather than an answer
// from (or the silence of) the target: no descriptors (EMFILE, ENFILE), no buffer memory
// (ENOBUFS, ENOMEM) or no free local port (EADDRNOTAVAIL).
func IsLocal(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Probe runs one check: a TCP connect, or an HTTP GET whose status must match. It returns the
// round trip of the connect or the request.
func Probe(ctx context.Context, client *http.Client, chk config.Check) (time.Duration, error) {
	timeout := time.Duration(chk.Timeout)
	if timeout <= 0 {
		timeout = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	switch chk.Type {
	case "http":
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+chk.Target+chk.Path, nil)
		if err != nil {
			return 0, fmt.Errorf("build probe request: %w", err)
		}
		req.Header.Set("User-Agent", "switchyard-dns-health")
		if client == nil {
			client = http.DefaultClient
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, fmt.Errorf("probe %s: %w", chk.Target, err)
		}
		resp.Body.Close()
		ok := resp.StatusCode >= 200 && resp.StatusCode < 400
		if chk.ExpectStatus != 0 {
			ok = resp.StatusCode == chk.ExpectStatus
		}
		if !ok {
			return 0, fmt.Errorf("probe %s: status %d", chk.Target, resp.StatusCode)
		}
	default:
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", chk.Target)
		if err != nil {
			return 0, fmt.Errorf("probe %s: %w", chk.Target, err)
		}
		conn.Close()
	}
	return time.Since(start), nil
}
