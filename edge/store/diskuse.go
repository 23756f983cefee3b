package store

import (
	"io/fs"
	"os"
	"syscall"
)

// The disk budget counts what the disk really holds: the blocks allocated to an entry's body and
// meta files (stat's st_blocks, in 512-byte units), not the body's length. With 4 KiB blocks a
// 480-byte object takes 8 KiB (body and meta); counting its logical 480 bytes let a 256 MiB cap
// grow to over 300 MB of allocated blocks.

// allocated returns the bytes allocated to a file, or its size rounded up to 4 KiB where the
// file system does not report blocks.
func allocated(st fs.FileInfo) int64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Blocks > 0 {
		return sys.Blocks * 512
	}
	return (st.Size() + 4095) &^ 4095
}

// metaAllocated returns the bytes allocated to the meta file at p (0 when it cannot be read).
func metaAllocated(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return allocated(st)
}

// measure records the allocated size of m's two files, for the disk budget.
func (s *Store) measure(m *Meta) {
	var n int64
	if st, err := os.Stat(s.path(m.File, ".body")); err == nil {
		n = allocated(st)
	}
	m.disk = n + metaAllocated(s.path(m.File, ".meta"))
}

// metaFileOverhead approximates an entry's meta file before its allocation is measured.
const metaFileOverhead = 512

// diskWeight is an entry's weight in the disk index: its allocated bytes, or (before they are
// known) its length plus the meta overhead.
func diskWeight(m *Meta) uint32 {
	w := m.disk
	if w <= 0 {
		w = m.Size + metaFileOverhead
	}
	return uint32(min(w, 1<<31))
}
