package edge

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The Go runtime grows the heap to twice the live data before it collects (GOGC=100), so a
// memory tier filled to its budget would let the process reach about twice the budget between
// collections. An edge that owns its process (`switchyard edge run`) therefore sets a soft memory
// limit a fifth above the budget plus a fixed allowance for everything else (connections,
// buffers, the runtime): the collector then runs as the heap nears it, and RSS stays within about
// 1.3x of memory.max_bytes. GOMEMLIMIT, when set, wins.
//
// The limit alone leaves GOGC=100 in charge while the heap is far below it, as it is with a cold
// or small cache: a live heap of a few MB is collected every few MB of garbage, many times a
// second under full TLS handshakes, and the collections (marking, sweeping, shrunk stacks grown
// again) were a large share of the edge's CPU per handshake (docs/measurements/edge.md,
// "handshake profile"). So with the limit the edge also lets the heap grow by the allowance the
// limit already counts before it collects: GOGC is kept at gcPercentFor(the live heap, stacks
// and globals), never below 100, re-read every headroomEvery; the limit still bounds the whole.
// GOGC, when set, wins.

// memoryAllowance is what the process needs besides the memory tier.
const memoryAllowance = 64 << 20

// headroomEvery is how often the edge re-reads what the collector scans to keep GOGC at
// gcPercentFor it.
const headroomEvery = time.Second

// MemoryLimit is the soft memory limit for an edge process with this configuration, 0 when the
// memory tier is bounded by object count (no byte figure to derive one from).
func MemoryLimit(cfg Config) int64 {
	b := int64(cfg.Memory.MaxBytes)
	if cfg.Memory.MaxObjects > 0 || b <= 0 {
		return 0
	}
	return b + b/5 + memoryAllowance
}

// ApplyMemoryLimit sets the edge's MemoryLimit as the runtime's soft memory limit unless
// GOMEMLIMIT is set, and with it the collector's headroom (unless GOGC is set) until Close; it
// returns the limit it set (0: none). Call it only in a process the edge owns.
func (e *Edge) ApplyMemoryLimit() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	lim := MemoryLimit(e.cfg)
	if lim <= 0 {
		return 0
	}
	debug.SetMemoryLimit(lim)
	if os.Getenv("GOGC") == "" && e.gcStop == nil {
		e.gcStop = make(chan struct{})
		prev := debug.SetGCPercent(gcPercentFor(gcBase()))
		go holdHeadroom(e.gcStop, prev)
	}
	return lim
}

// gcPercentFor is the GOGC that lets the heap grow by memoryAllowance (or double, when that is
// more) past what the collector scans, base bytes (the live heap, stacks and globals: GOGC is a
// share of them), before the next collection. The runtime's least heap goal, 4 MiB, scales
// with GOGC too, so a base below that counts as 4 MiB: the goal is then about the allowance.
func gcPercentFor(base uint64) int {
	base = max(base, 4<<20)
	return max(100, int(memoryAllowance*100/base))
}

// gcBase is what the last collection found to scan: the live heap, the goroutine stacks and
// the globals, the base GOGC is a share of.
func gcBase() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	metrics.Read(s)
	var sum uint64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			sum += v.Value.Uint64()
		}
	}
	return sum
}

// holdHeadroom keeps GOGC at gcPercentFor the collector's base until stop closes, then puts back
// prev.
func holdHeadroom(stop <-chan struct{}, prev int) {
	t := time.NewTicker(headroomEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			debug.SetGCPercent(prev)
			return
		case <-t.C:
			debug.SetGCPercent(gcPercentFor(gcBase()))
		}
	}
}
