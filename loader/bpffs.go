package loader

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// BPFFSRoot is where bpffs is expected.
const BPFFSRoot = "/sys/fs/bpf"

// EnsureBPFFS makes sure the directory that will hold pins (or one of its parents, normally
// /sys/fs/bpf) is on a bpf filesystem, mounting bpffs at /sys/fs/bpf when nothing is mounted there,
// as systemd and Cilium do. Pins on any other filesystem would fail.
func EnsureBPFFS(pinDir string) error {
	if onBPFFS(pinDir) {
		return nil
	}
	if err := os.MkdirAll(BPFFSRoot, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", BPFFSRoot, err)
	}
	if !onBPFFS(BPFFSRoot) {
		if err := unix.Mount("bpf", BPFFSRoot, "bpf", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mount bpffs at %s: %w (mount it by hand: mount -t bpf bpf %s)", BPFFSRoot, err, BPFFSRoot)
		}
	}
	if !onBPFFS(pinDir) {
		return fmt.Errorf("pin directory %s is not on a bpf filesystem: put it under %s", pinDir, BPFFSRoot)
	}
	return nil
}

// onBPFFS reports whether path (or, while it does not exist yet, its nearest existing parent)
// is on bpffs.
func onBPFFS(path string) bool {
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err == nil {
			return st.Type == unix.BPF_FS_MAGIC
		}
		if p == "/" || p == "." {
			return false
		}
	}
}
