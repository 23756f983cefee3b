package lowprio

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// lower raises the calling thread's nice value by nice (Linux: PRIO_PROCESS with a thread id
// changes that thread alone).
func lower(nice int) error {
	tid := unix.Gettid()
	cur, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
	if err != nil {
		return fmt.Errorf("read the thread's priority: %w", err)
	}
	// The raw getpriority call returns 20 - nice.
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, min(20-cur+nice, 19)); err != nil {
		return fmt.Errorf("lower the thread's priority: %w", err)
	}
	return nil
}
