package balance

import (
	"sync"
	"sync/atomic"
	"time"
)

// snapshot is a picker's view of its backends at one moment: the available ones, and what the
// algorithm derives from them (a schedule, a ring). A pick reads it without a lock and without
// asking each backend for its state; it is rebuilt, in O(n), only when a backend's
// availability changed or the earliest ejection of the pool ended.
type snapshot[T any] struct {
	gen    uint64     // the watch counter it was built at
	expiry int64      // earliest end of an ejection (unix ns); 0 when none is ejected
	live   []*Backend // available backends, in pool order
	data   T
}

// tracker keeps a picker's current snapshot.
type tracker[T any] struct {
	backends []*Backend
	w        *watch
	derive   func(live []*Backend) T
	mu       sync.Mutex // serialises rebuilds
	cur      atomic.Pointer[snapshot[T]]
}

func newTracker[T any](backends []*Backend, derive func(live []*Backend) T) *tracker[T] {
	t := &tracker[T]{backends: backends, w: &watch{}, derive: derive}
	for _, b := range backends {
		b.addWatch(t.w)
	}
	t.rebuild()
	return t
}

// fresh reports whether s still describes the backends: no change since, and no ejection over.
// The clock is read only while a backend is ejected, and then once, not once per backend.
func (t *tracker[T]) fresh(s *snapshot[T]) bool {
	return s != nil && s.gen == t.w.gen.Load() && (s.expiry == 0 || time.Now().UnixNano() < s.expiry)
}

// load returns the current snapshot, rebuilding it first when it is stale.
func (t *tracker[T]) load() *snapshot[T] {
	if s := t.cur.Load(); t.fresh(s) {
		return s
	}
	return t.rebuild()
}

func (t *tracker[T]) rebuild() *snapshot[T] {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.cur.Load(); t.fresh(s) {
		return s // another pick rebuilt it meanwhile
	}
	// The counter is read before the states: a change during the scan leaves the snapshot stale.
	s := &snapshot[T]{gen: t.w.gen.Load()}
	now := time.Now().UnixNano()
	for _, b := range t.backends {
		if b.unhealthy.Load() || b.draining.Load() {
			continue
		}
		if until := b.ejectedUntil.Load(); now < until {
			if s.expiry == 0 || until < s.expiry {
				s.expiry = until
			}
			continue
		}
		s.live = append(s.live, b)
	}
	s.data = t.derive(s.live)
	t.cur.Store(s)
	return s
}
