package core

import (
	"errors"
	"syscall"
)

// LocalResource reports an error that is the proxy's own shortage, not the backend's fault:
// out of descriptors (EMFILE, ENFILE), memory or socket buffers (ENOMEM, ENOBUFS), or local
// ports (EADDRNOTAVAIL). Such a failure is never counted against a backend, neither by passive
// ejection nor by active health checks: a proxy out of descriptors marking every healthy
// backend down turns a local overload into a full outage.
func LocalResource(err error) bool {
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS, syscall.EADDRNOTAVAIL} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
