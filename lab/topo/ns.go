// Package topo builds the lab's topology of network namespaces with netlink: a router namespace
// as the fabric (one bridge per segment, routing between them), client hosts, balancers,
// backends and room for the other stops (DNS, edge cache, L7 tier). It knows nothing of what
// runs inside the namespaces; package lab starts the programs and processes. Namespaces are
// made, entered and removed by package namednetns.
package topo

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/switchyard/switchyard/internal/namednetns"
)

// Sysctl writes a sysctl (dotted or slashed name) inside the named namespace: /proc/sys/net
// resolves to the namespace of the thread that opens it.
func Sysctl(ns, name, value string) error { return writeSysctl(ns, name, value, false) }

// sysctlIfPresent writes a sysctl that only some kernels have (net.bridge.* exists only with
// br_netfilter): nothing to do when it is missing.
func sysctlIfPresent(ns, name, value string) error { return writeSysctl(ns, name, value, true) }

func writeSysctl(ns, name, value string, optional bool) error {
	p := filepath.Join("/proc/sys", strings.ReplaceAll(name, ".", "/"))
	return namednetns.DoNamed(ns, func() error {
		err := os.WriteFile(p, []byte(value), 0o644)
		if err != nil && !(optional && errors.Is(err, os.ErrNotExist)) {
			return fmt.Errorf("set sysctl %s=%s in %s: %w", name, value, ns, err)
		}
		return nil
	})
}
