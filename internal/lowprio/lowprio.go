// Package lowprio runs background work on one OS thread of lower scheduling priority than the
// rest of the process, so that when the CPUs are contended the kernel runs the process's
// foreground threads first. The DNS stop applies dynamic updates on it: a burst of updates (a
// zone rebuild and a journal sync each) then takes the CPU the answers leave, instead of
// delaying them.
package lowprio

import "runtime"

// Thread runs the functions given to Do, one at a time, on its own OS thread.
type Thread struct {
	work chan func()
	// Err is why the thread's priority could not be lowered (nil when it was): its work then
	// runs at the process's priority.
	Err error
}

// Start starts a thread niced by nice (1-19; Linux nice values are per thread) above the
// process's.
func Start(nice int) *Thread {
	t := &Thread{work: make(chan func())}
	ready := make(chan struct{})
	go func() {
		// Never unlocked: the thread ends with the goroutine, and no other goroutine inherits
		// its priority.
		runtime.LockOSThread()
		t.Err = lower(nice)
		close(ready)
		for f := range t.work {
			f()
		}
	}()
	<-ready
	return t
}

// Do runs f on the thread and returns when it has returned. f must not call Do.
func (t *Thread) Do(f func()) {
	done := make(chan struct{})
	t.work <- func() { defer close(done); f() }
	<-done
}

// Stop ends the thread once the work given to it is done; Do must not be called after.
func (t *Thread) Stop() { close(t.work) }
