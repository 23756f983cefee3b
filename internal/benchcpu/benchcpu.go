// Package benchcpu reports the CPU time a Go benchmark's own thread spent per operation.
package benchcpu

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// Start reports, next to ns/op, the CPU time the benchmark's own thread spent per operation
// (cpu-ns/op). On a shared machine wall time per operation also counts the time other processes
// held the core; thread CPU time does not, so ratios between sizes are steadier. Call at the
// start of the timed loop and call the result at its end.
func Start(b *testing.B) func() {
	runtime.LockOSThread()
	var start unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &start)
	b.ResetTimer()
	return func() {
		var end unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &end)
		runtime.UnlockOSThread()
		b.ReportMetric(float64(end.Nano()-start.Nano())/float64(b.N), "cpu-ns/op")
	}
}
