package loader

import (
	"os"
	"testing"

	"github.com/switchyard/switchyard/internal/testutil"
)

func TestEnsureBPFFS(t *testing.T) {
	testutil.RequireRoot(t)
	if err := EnsureBPFFS("/sys/fs/bpf/switchyard/test-x"); err != nil {
		t.Fatal(err)
	}
	if !onBPFFS("/sys/fs/bpf") {
		t.Fatal("/sys/fs/bpf not bpffs after EnsureBPFFS")
	}
	if err := EnsureBPFFS("/tmp/not-bpffs"); err == nil {
		t.Fatal("a pin dir outside bpffs was accepted")
	}
}

func TestDetachRemovesEmptyParents(t *testing.T) {
	testutil.RequireRoot(t)
	if err := EnsureBPFFS(BPFFSRoot); err != nil {
		t.Fatal(err)
	}
	root := "/sys/fs/bpf/switchyard-detach-test"
	pin := root + "/a/b"
	t.Cleanup(func() { os.RemoveAll(root) })
	f, err := LoadForwarder(Options{PinDir: pin, RingSize: 13, MaxVIPs: 2, MaxBackends: 8, ConnTableSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := Detach(pin); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("%s left behind after detach: %v", root, err)
	}
}
