//go:build unix

package l7

import (
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/l7/core"
)

// peekFD reports whether an idle socket has bytes waiting or was shut by its peer.
func peekFD(fd int) core.IdleProbe {
	var b [1]byte
	// A raw recvfrom without the source address: unix.Recvfrom allocates one per call, and
	// this runs once per reused upstream connection.
	n, _, errno := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	switch {
	case errno == unix.EAGAIN || errno == unix.EINTR:
		return core.IdleQuiet
	case errno != 0 || n == 0:
		return core.IdleShut
	}
	return core.IdleReadable
}
