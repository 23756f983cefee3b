package yamlx

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// MaxFileBytes bounds a configuration file (16 MiB). The largest the stops are measured with, an
// L4 file of 4,096 VIPs, is about 2.6 MB; decoding takes several times a file's size in memory
// (a 100 MB file took a running L7 from 36 to 667 MB), so a file past the bound is refused
// before it is read rather than grown into a running process.
const MaxFileBytes = 16 << 20

// ReadFile reads the configuration file at path, refusing one larger than MaxFileBytes. Every
// stop's Load reads its file through it (a reload too, so a refused file keeps the running
// configuration).
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Read one byte past the bound rather than trust Stat: a pipe or /proc file has no size.
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		size := int64(len(b))
		if st, err := f.Stat(); err == nil && st.Size() > size {
			size = st.Size()
		}
		return nil, fmt.Errorf("read %s: %w", path, tooLarge(size))
	}
	return b, nil
}

// ErrTooLarge is the error (wrapped) for a configuration past MaxFileBytes.
var ErrTooLarge = errors.New("configuration too large")

func tooLarge(size int64) error {
	return fmt.Errorf("%w: %d bytes, over the limit of %d (16 MiB): check that it is the intended file; a configuration this large is not supported (4,096 L4 VIPs take about 2.6 MB)", ErrTooLarge, size, MaxFileBytes)
}
