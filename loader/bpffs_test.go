package loader

import "testing"

func TestEnsureBPFFS(t *testing.T) {
	requireRoot(t)
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
