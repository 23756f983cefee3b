// Package balance holds the L7 backends of a pool and the algorithms that pick one per request:
// smooth weighted round robin, least-requests with power of two choices, consistent hashing on a
// ring with bounded load, and sticky cookie sessions on top of any of them.
package balance

import (
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// Backend is one upstream server of a pool. Its state is shared by the balancer, the health
// checker, the outlier detector and the admin endpoint, so every field that changes at run time
// is atomic: the request path never takes a lock to read it.
type Backend struct {
	// Address is host:port of the server.
	Address string
	// Weight is the relative share for weighted algorithms (>= 1).
	Weight int

	inFlight     atomic.Int64
	unhealthy    atomic.Bool  // set by active health checks
	draining     atomic.Bool  // set by the admin drain endpoint
	ejectedUntil atomic.Int64 // unix nanoseconds; set by passive outlier ejection

	// watchers are the pickers over this backend, told when its availability changes so they
	// rebuild their snapshot (snapshot.go). Weak: a backend outlives reloads, and must not keep
	// the pickers of retired configurations alive.
	wmu      sync.Mutex
	watchers []weak.Pointer[watch]
}

// NewBackend returns a healthy, undrained backend.
func NewBackend(address string, weight int) *Backend {
	if weight < 1 {
		weight = 1
	}
	return &Backend{Address: address, Weight: weight}
}

// Available reports whether new requests may go to the backend: healthy, not drained, not ejected.
func (b *Backend) Available() bool {
	return !b.unhealthy.Load() && !b.draining.Load() && !b.Ejected()
}

// Healthy reports the active health-check verdict.
func (b *Backend) Healthy() bool { return !b.unhealthy.Load() }

// SetHealthy records the active health-check verdict.
func (b *Backend) SetHealthy(ok bool) {
	if b.unhealthy.Swap(!ok) != !ok {
		b.changed()
	}
}

// Draining reports whether the backend was drained by an operator.
func (b *Backend) Draining() bool { return b.draining.Load() }

// SetDraining drains (true) or restores (false) the backend. Draining only stops new requests;
// requests already in flight finish normally because nothing cancels them.
func (b *Backend) SetDraining(on bool) {
	if b.draining.Swap(on) != on {
		b.changed()
	}
}

// Ejected reports whether passive outlier detection has the backend out of rotation now.
func (b *Backend) Ejected() bool { return time.Now().UnixNano() < b.ejectedUntil.Load() }

// Eject takes the backend out of rotation until the given time.
func (b *Backend) Eject(until time.Time) {
	b.ejectedUntil.Store(until.UnixNano())
	b.changed()
}

// InFlight is the number of requests currently forwarded to the backend.
func (b *Backend) InFlight() int64 { return b.inFlight.Load() }

// Acquire counts a request as in flight; call Release when its response is done.
func (b *Backend) Acquire() { b.inFlight.Add(1) }

// Release ends a request counted by Acquire.
func (b *Backend) Release() { b.inFlight.Add(-1) }

// Exclude tells a picker which backends it must not return, beyond the unavailable ones; retries
// use it to land on a different backend than the attempts before. Pass nil on a first try: a
// non-nil Exclude marks a retry, which round robin serves without advancing its position (as
// nginx's algorithm does), so that retries do not shift the shares of first tries.
type Exclude func(*Backend) bool

func skip(b *Backend, ex Exclude) bool { return !b.Available() || (ex != nil && ex(b)) }

// watch is a picker's change counter: every availability change of one of its backends bumps it.
type watch struct{ gen atomic.Uint64 }

// addWatch registers w for b's changes, dropping watchers whose picker is gone.
func (b *Backend) addWatch(w *watch) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	b.pruneLocked()
	b.watchers = append(b.watchers, weak.Make(w))
}

// changed tells every live watcher that b's availability changed.
func (b *Backend) changed() {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	for _, wp := range b.watchers {
		if w := wp.Value(); w != nil {
			w.gen.Add(1)
		}
	}
	b.pruneLocked()
}

func (b *Backend) pruneLocked() {
	live := b.watchers[:0]
	for _, wp := range b.watchers {
		if wp.Value() != nil {
			live = append(live, wp)
		}
	}
	clear(b.watchers[len(live):])
	b.watchers = live
}
