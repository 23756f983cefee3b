package edge

import "time"

// WithClock sets the clock the cache stamps and ages its entries by (default time.Now), so a
// test can make an entry stale by moving the clock instead of sleeping past its max-age.
func WithClock(now func() time.Time) Option { return func(e *Edge) { e.clock = now } }

// now is the cache's time: what WithClock set, or the wall clock.
func (e *Edge) now() time.Time {
	if e.clock == nil {
		return time.Now()
	}
	return e.clock()
}
