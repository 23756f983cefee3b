package loader

import "github.com/cilium/ebpf/btf"

func sizeof(t btf.Type) (uint32, error) {
	n, err := btf.Sizeof(t)
	return uint32(n), err
}
