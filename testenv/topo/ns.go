// Package topo builds the lab's topology of network namespaces with netlink: a router namespace
// as the fabric (one bridge per segment, routing between them), client hosts, balancers,
// backends and room for the other stops (DNS, edge cache, L7 tier). It knows nothing of what
// runs inside the namespaces; package lab starts the programs and processes.
package topo

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
)

// NetnsDir is where named network namespaces are bind-mounted (as `ip netns` does).
const NetnsDir = "/run/netns"

// NSPath is the bind-mount path of a named namespace, for `nsenter --net=PATH`.
func NSPath(name string) string { return filepath.Join(NetnsDir, name) }

// Exists reports whether a named namespace exists.
func Exists(name string) bool {
	_, err := os.Stat(NSPath(name))
	return err == nil
}

// Do runs fn on an OS thread switched into the named namespace. Sockets created inside fn stay
// in that namespace for their whole life, whichever goroutine uses them later; goroutines that fn
// starts do not inherit the namespace.
func Do(name string, fn func() error) error {
	target, err := netns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("open namespace %s: %w (is the lab up? `switchyard lab status`)", name, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current namespace: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace %s: %w", name, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// The thread is stuck in the other namespace: leave it locked so that the runtime
		// throws it away when this goroutine ends, instead of reusing it.
		return errors.Join(ferr, fmt.Errorf("return from namespace %s: %w", name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// In runs fn in the named namespace and returns what it made (a socket keeps the namespace it
// was created in).
func In[T any](name string, fn func() (T, error)) (T, error) {
	var v T
	err := Do(name, func() error {
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

// create makes a named namespace (an empty one if it already exists is reused: `up` is
// idempotent).
func create(name string) error {
	if Exists(name) {
		return nil
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open current namespace: %w", err)
	}
	defer orig.Close()
	h, err := netns.NewNamed(name)
	if err != nil {
		if serr := netns.Set(orig); serr == nil {
			runtime.UnlockOSThread()
		}
		return fmt.Errorf("create namespace %s: %w (needs root)", name, err)
	}
	h.Close()
	if err := netns.Set(orig); err != nil {
		return fmt.Errorf("return from namespace %s: %w", name, err)
	}
	runtime.UnlockOSThread()
	return nil
}

// Remove deletes a named namespace (its interfaces go with it).
func Remove(name string) error {
	if !Exists(name) {
		return nil
	}
	if err := netns.DeleteNamed(name); err != nil {
		return fmt.Errorf("delete namespace %s: %w", name, err)
	}
	return nil
}

// List returns the named namespaces whose names start with prefix+"-".
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(NetnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Sysctl writes a sysctl (dotted or slashed name) inside the named namespace: /proc/sys/net
// resolves to the namespace of the thread that opens it.
func Sysctl(ns, name, value string) error { return writeSysctl(ns, name, value, false) }

// sysctlIfPresent writes a sysctl that only some kernels have (net.bridge.* exists only with
// br_netfilter): nothing to do when it is missing.
func sysctlIfPresent(ns, name, value string) error { return writeSysctl(ns, name, value, true) }

func writeSysctl(ns, name, value string, optional bool) error {
	p := filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
	return Do(ns, func() error {
		err := os.WriteFile(p, []byte(value), 0o644)
		if err != nil && !(optional && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("set sysctl %s=%s in %s: %w", name, value, ns, err)
		}
		return nil
	})
}
