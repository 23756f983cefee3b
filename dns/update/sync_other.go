//go:build !linux

package update

import "os"

// syncData makes the file's data durable.
func syncData(f *os.File) error { return f.Sync() }
