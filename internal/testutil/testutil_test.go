package testutil

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/vishvananda/netns"
)

func TestPoll(t *testing.T) {
	start := time.Now()
	n := 0
	if !poll(time.Second, func() bool { n++; return n == 3 }) {
		t.Fatal("poll gave up on a condition that holds on the third call")
	}
	if poll(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("poll reported a condition that never holds")
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 2*time.Second {
		t.Fatalf("poll took %v, want about the 50 ms timeout", d)
	}
}

func TestProbeUnknown(t *testing.T) {
	if probe("nope") == nil {
		t.Fatal("an unknown feature probed as present")
	}
}

// TestDoRestores checks that Do runs fn in a fresh namespace and leaves the caller's alone.
func TestDoRestores(t *testing.T) {
	RequireRoot(t)
	RequireKernel(t, Netns)
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	var inside netns.NsHandle
	Do(t, netns.None(), func() error {
		var err error
		inside, err = netns.New() // moves this thread
		return err
	})
	defer inside.Close()
	if inside.Equal(before) {
		t.Fatal("fn ran in the caller's namespace")
	}
	sawInside := false
	Do(t, inside, func() error {
		cur, err := netns.Get()
		if err != nil {
			return err
		}
		defer cur.Close()
		sawInside = cur.Equal(inside)
		return nil
	})
	if !sawInside {
		t.Fatal("Do did not switch into the namespace it was given")
	}
	if err := namednetns.Do(inside, func() error { return errors.New("boom") }); err == nil || err.Error() != "boom" {
		t.Fatalf("Do lost fn's error: %v", err)
	}
}

// TestDoFnStops: a fn that ends its goroutine (as t.Fatal does) does not hang Do.
func TestDoFnStops(t *testing.T) {
	RequireRoot(t)
	err := namednetns.Do(netns.None(), func() error { runtime.Goexit(); return nil })
	if !errors.Is(err, namednetns.ErrStopped) {
		t.Fatalf("Do after Goexit: %v", err)
	}
}

// TestEventuallyMessage: the failure message shows the last poll's state through func() any.
func TestEventuallyMessage(t *testing.T) {
	n := 0
	var ft fakeT
	func() {
		defer func() { recover() }()
		Eventually(&ft, 30*time.Millisecond, func() bool { n++; return false }, "n=%v want %d", func() any { return n }, 7)
	}()
	if want := fmt.Sprintf("after 30ms: n=%d want 7", n); ft.msg != want {
		t.Fatalf("message %q, want %q", ft.msg, want)
	}
}

// fakeT records Fatalf's message and stops the caller with a panic (Eventually only calls
// Helper and Fatalf).
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

// TestProbeRoot: as root on this kernel every known feature is there (the lab needs them all).
func TestProbeRoot(t *testing.T) {
	RequireRoot(t)
	for _, f := range []Feature{BPF, XDP, BTF, Netns} {
		if err := probe(f); err != nil {
			t.Errorf("probe %s: %v", f, err)
		}
	}
}
