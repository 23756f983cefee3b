// Package namednetns makes, enters and removes named network namespaces: the one way switchyard
// (the lab, its tests and the benchmarks) creates them, compatible with iproute2's `ip netns`.
//
// A named namespace is an nsfs bind mount on a file under /run/netns. iproute2 first makes
// /run/netns a shared mount point (binding it over itself when it is not one yet) so that the
// namespace mounts propagate between mount namespaces. Creating namespaces there before that
// step, and letting `ip netns add` do it later, hides every earlier namespace mount under the new
// bind: they can no longer be entered nor removed ("device or resource busy"). A fresh machine,
// where /run/netns has never been mounted, does exactly that. Create therefore makes /run/netns
// a shared mount point itself, before the first namespace file is bound there.
package namednetns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where named network namespaces are bind-mounted (as `ip netns` does).
const Dir = "/run/netns"

// Path is the bind-mount path of a named namespace, for `nsenter --net=PATH`.
func Path(name string) string { return filepath.Join(Dir, name) }

// Exists reports whether a named namespace exists.
func Exists(name string) bool {
	_, err := os.Stat(Path(name))
	return err == nil
}

// Create makes the named namespace. It is idempotent: a namespace that exists already is kept.
func Create(name string) error {
	if err := validName(name); err != nil {
		return err
	}
	if Exists(name) {
		return nil
	}
	if err := sharedDir(); err != nil {
		return err
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current namespace: %w", err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name) // moves this thread into the new namespace
	if err != nil {
		if serr := netns.Set(orig); serr == nil {
			runtime.UnlockOSThread()
		}
		return fmt.Errorf("create namespace %s: %w (needs root)", name, err)
	}
	h.Close()
	if err := netns.Set(orig); err != nil {
		// Still locked: the runtime discards the thread with its goroutine instead of reusing it.
		return fmt.Errorf("return from namespace %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return nil
}

// Remove deletes the named namespace (its interfaces go with it once no process holds it). A
// namespace that does not exist is not an error.
func Remove(name string) error {
	if !Exists(name) {
		return nil
	}
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("delete namespace %s: %w (a process still inside keeps it alive; `ip netns pids %s` names it)", name, err, name)
	}
	return nil
}

// List returns the named namespaces whose names start with prefix.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// sharedDir makes Dir a shared, recursive mount point, as iproute2's `ip netns add` does before
// its first namespace (its netns_add): mark it shared; when that fails with EINVAL, Dir is not
// a mount point yet, so bind it over itself and mark it again.
func sharedDir() error {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w (needs root)", Dir, err)
	}
	err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("make %s a shared mount: %w (needs root)", Dir, err)
	}
	if err := unix.Mount(Dir, Dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a mount point: %w (needs root)", Dir, err)
	}
	if err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make %s a shared mount: %w", Dir, err)
	}
	return nil
}

// validName refuses names that are not one path element (iproute2 refuses them too).
func validName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return fmt.Errorf("namespace name %q: want one path element, not empty, without '/'", name)
	}
	return nil
}

// ErrStopped is Do's error when fn ended its goroutine (runtime.Goexit, as t.Fatal does)
// instead of returning.
var ErrStopped = errors.New("fn stopped its goroutine (t.Fatal inside fn)")

// Do runs fn on an OS thread of its own, switched into ns, and returns what fn returns. Sockets
// fn creates stay in ns for their whole life, whichever goroutine uses them later; goroutines fn
// starts do not inherit the namespace. With ns == netns.None() the thread starts in the caller's
// namespace and fn may move it. Either way the thread goes back to the namespace it started in;
// if that fails it stays locked, so the runtime discards it instead of reusing it.
func Do(ns netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		err := ErrStopped // what is sent if fn calls runtime.Goexit
		defer func() { errc <- err }()
		runtime.LockOSThread()
		orig, oerr := netns.Get()
		if oerr != nil {
			runtime.UnlockOSThread()
			err = fmt.Errorf("open current namespace: %w", oerr)
			return
		}
		defer orig.Close()
		if ns != netns.None() {
			if serr := netns.Set(ns); serr != nil {
				runtime.UnlockOSThread()
				err = fmt.Errorf("enter namespace %s: %w", ns, serr)
				return
			}
		}
		defer func() {
			if serr := netns.Set(orig); serr != nil {
				err = errors.Join(err, fmt.Errorf("return to namespace %s: %w", orig, serr))
				return // still locked: the thread dies with this goroutine
			}
			runtime.UnlockOSThread()
		}()
		err = fn()
	}()
	return <-errc
}

// DoNamed is Do in the named namespace.
func DoNamed(name string, fn func() error) error {
	h, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open namespace %s: %w (does it exist? `ip netns list`)", name, err)
	}
	defer h.Close()
	return Do(h, fn)
}

// In runs fn in the named namespace and returns what it made (a socket keeps the namespace it
// was created in).
func In[T any](name string, fn func() (T, error)) (T, error) {
	var v T
	err := DoNamed(name, func() error {
		var err error
		v, err = fn()
		return err
	})
	return v, err
}

// Dialer returns a DialContext function whose sockets are created in the named namespace: a
// test or experiment acts as a client host without a process of its own there.
func Dialer(name string, d *net.Dialer) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if d == nil {
		d = &net.Dialer{}
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return In(name, func() (net.Conn, error) { return d.DialContext(ctx, network, addr) })
	}
}

// Listen opens a listener in the named namespace.
func Listen(name, network, addr string) (net.Listener, error) {
	return In(name, func() (net.Listener, error) { return net.Listen(network, addr) })
}

// ListenPacket opens a packet socket in the named namespace.
func ListenPacket(name, network, addr string) (net.PacketConn, error) {
	return In(name, func() (net.PacketConn, error) { return net.ListenPacket(network, addr) })
}
