package testutil

import (
	"io"
	"os/exec"
	"time"
)

// StopChild ends a child test process that runs until its stdin closes: it closes stdin, so
// that the child returns and its own cleanups run (its temporary directories, its servers),
// and kills a child still there after wait. Killing first would leave those behind.
func StopChild(cmd *exec.Cmd, stdin io.Closer, wait time.Duration) {
	stdin.Close()
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		cmd.Process.Kill()
		<-done
	}
}
