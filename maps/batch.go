package maps

import (
	"errors"

	"github.com/cilium/ebpf"
)

// batchChunk is how many entries one BPF_MAP_LOOKUP_BATCH call reads: a restart reads the
// 65,536-slot backends array in 16 calls instead of 131,072 (a next-key and a lookup each).
const batchChunk = 4096

// readAll calls fn with every key and value of m (not a per-CPU map: see sumAllPerCPU), in
// chunks of BPF_MAP_LOOKUP_BATCH.
func readAll[K, V any](m *ebpf.Map, fn func(K, V)) error {
	keys, vals := make([]K, batchChunk), make([]V, batchChunk)
	var cursor ebpf.MapBatchCursor
	for {
		n, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < n; i++ {
			fn(keys[i], vals[i])
		}
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}
