package update

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncData makes the file's data and size durable (fdatasync: its times are not waited for).
func syncData(f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := sc.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		return err
	}
	return serr
}
