//go:build unix

package l7

import (
	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/l7/core"
)

// peekFD reports whether an idle socket has bytes waiting or was shut by its peer.
func peekFD(fd int) core.IdleProbe {
	var b [1]byte
	n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	switch {
	case err == unix.EAGAIN || err == unix.EINTR:
		return core.IdleQuiet
	case err != nil || n == 0:
		return core.IdleShut
	}
	return core.IdleReadable
}
