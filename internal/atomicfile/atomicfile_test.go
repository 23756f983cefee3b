package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A write replaces the file whole with its mode; a failing fill leaves the old file and no
// temporary file.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "f")
	if err := WriteBytes(p, 0o600, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, 0o600, func(w io.Writer) error { w.Write([]byte("half")); return errors.New("boom") }); err == nil {
		t.Fatal("a failing fill succeeded")
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	entries, _ := os.ReadDir(filepath.Dir(p))
	if string(b) != "one" || st.Mode().Perm() != 0o600 || len(entries) != 1 {
		t.Fatalf("after a failed write: %q, mode %v, %d files in the directory", b, st.Mode().Perm(), len(entries))
	}
}
