package udpio

import (
	"strings"
	"testing"
)

func TestUDPWaitUnknown(t *testing.T) {
	if _, err := ParseWait("busy"); err == nil || !strings.Contains(err.Error(), "netpoll, thread or spin") {
		t.Fatalf("parse busy: %v, want an error naming the modes", err)
	}
	t.Setenv(udpWaitEnv, "thread")
	if w, err := ParseWait(""); err != nil || w != WaitThread {
		t.Fatalf("from the environment: %v %v", w, err)
	}
}
