// Package atomicfile writes a file so that a crash leaves the old content or the new, never
// part of either: a temporary file beside it, filled, synced, renamed over it, the directory
// synced. The state a stop must find again after a restart (configurations, zone copies,
// journals, store caches) is written this one way.
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with what fill writes (buffered), with mode perm; the directory is made
// (0750) when missing. A failure leaves path as it was and no temporary file behind.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // gone after the rename; removes what a failure left
	w := bufio.NewWriter(f)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync() // the rename is durable too
		d.Close()
	}
	return nil
}

// WriteBytes replaces path with b (Write).
func WriteBytes(path string, perm os.FileMode, b []byte) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
