// Package testutil holds the helpers that tests across the tree share: skipping when root or a
// kernel feature is missing, running code inside a network namespace, and waiting for a
// condition with a deadline instead of a fixed sleep (the test machine is shared and slow).
package testutil

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/vishvananda/netns"

	"github.com/switchyard/switchyard/internal/namednetns"
)

// RequireRoot skips the test unless it runs as root (namespaces, BPF and XDP need it).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, BPF, XDP): run the tests as root, e.g. `sudo make test`")
	}
}

// RequireLab skips the test unless it runs as root and without -short: the end-to-end lab tests
// build namespaces and run daemons, which -short is meant to avoid.
func RequireLab(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	if testing.Short() {
		t.Skip("end-to-end lab tests are skipped with -short")
	}
}

// Feature is a kernel feature a test needs.
type Feature string

// The kernel features RequireKernel can probe.
const (
	BPF   Feature = "bpf"   // loading BPF programs (socket filter)
	XDP   Feature = "xdp"   // XDP programs
	BTF   Feature = "btf"   // the kernel's own BTF (/sys/kernel/btf/vmlinux)
	Netns Feature = "netns" // network namespaces
)

// RequireKernel skips the test when the running kernel lacks feature (or the test lacks the
// privilege to use it), naming what is missing.
func RequireKernel(t testing.TB, feature Feature) {
	t.Helper()
	if err := probe(feature); err != nil {
		t.Skipf("needs kernel feature %s: %v", feature, err)
	}
}

// probe reports why feature is unavailable, or nil.
func probe(feature Feature) error {
	switch feature {
	case BPF:
		return features.HaveProgramType(ebpf.SocketFilter)
	case XDP:
		return features.HaveProgramType(ebpf.XDP)
	case BTF:
		_, err := os.Stat("/sys/kernel/btf/vmlinux")
		return err
	case Netns:
		_, err := os.Stat("/proc/self/ns/net")
		return err
	}
	return fmt.Errorf("unknown feature %q (use one of bpf, xdp, btf, netns)", feature)
}

// Do runs fn on an OS thread of its own, switched into ns, and returns when fn does
// (namednetns.Do); a t.Fatal inside fn fails the test as it would outside.
func Do(t testing.TB, ns netns.NsHandle, fn func() error) {
	t.Helper()
	switch err := namednetns.Do(ns, fn); {
	case errors.Is(err, namednetns.ErrStopped) && t.Failed():
		t.FailNow() // fn already reported why
	case err != nil:
		t.Fatal(err)
	}
}

// DoNamed is Do in the namespace with the given name (as `ip netns` names it).
func DoNamed(t testing.TB, name string, fn func() error) {
	t.Helper()
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("open namespace %s: %v", name, err)
	}
	defer h.Close()
	Do(t, h, fn)
}

// NamedNS makes the named network namespace (namednetns.Create, the one way the project makes
// them) and removes it when the test ends. A namespace of that name left by an earlier run is
// removed first.
func NamedNS(t testing.TB, name string) {
	t.Helper()
	if err := namednetns.Remove(name); err != nil {
		t.Fatal(err)
	}
	if err := namednetns.Create(name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := namednetns.Remove(name); err != nil {
			t.Errorf("clean up: %v", err)
		}
	})
}

// Eventually polls cond until it returns true, failing the test with msgf's message when timeout
// passes first. Use it where a test waits for something to happen; a fixed sleep either wastes
// time or flakes on a loaded machine. An arg of type func() any is called when the message is
// made, so the message can show the last poll's state rather than the state at the call.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msgf string, args ...any) {
	t.Helper()
	if poll(timeout, cond) {
		return
	}
	vals := []any{timeout}
	for _, a := range args {
		if f, ok := a.(func() any); ok {
			a = f()
		}
		vals = append(vals, a)
	}
	t.Fatalf("after %v: "+msgf, vals...)
}

// poll calls cond every few milliseconds (backing off to 100 ms) until it holds or timeout passes;
// it always checks once more at the deadline.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(min(wait, time.Until(deadline)+time.Millisecond))
		wait = min(2*wait, 100*time.Millisecond)
	}
}
