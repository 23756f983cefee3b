package lowprio

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// nice returns the calling thread's nice value.
func nice(t *testing.T) (tid, n int) {
	tid = unix.Gettid()
	p, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		t.Fatal(err)
	}
	return tid, 20 - p
}

// The work runs on one thread, niced above the caller's, and the caller's thread keeps its own.
func TestWorkRunsOnOneLowerPriorityThread(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, base := nice(t)
	if base > 9 {
		t.Skipf("the test runs at nice %d: no room to lower a thread by 10", base)
	}
	th := Start(10)
	defer th.Stop()
	if th.Err != nil {
		t.Fatal(th.Err)
	}
	var tids []int
	for range 3 {
		th.Do(func() {
			tid, n := nice(t)
			if n != base+10 {
				t.Errorf("work ran at nice %d, want %d", n, base+10)
			}
			tids = append(tids, tid)
		})
	}
	if tids[0] != tids[1] || tids[1] != tids[2] {
		t.Errorf("work ran on threads %v, want one", tids)
	}
	if tid, n := nice(t); n != base || tid == tids[0] {
		t.Errorf("the caller's thread %d is at nice %d (work's thread %d), want %d", tid, n, tids[0], base)
	}
}
