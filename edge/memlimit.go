package edge

import (
	"os"
	"runtime/debug"
)

// The Go runtime grows the heap to twice the live data before it collects (GOGC=100), so a
// memory tier filled to its budget would let the process reach about twice the budget between
// collections. An edge that owns its process (`switchyard edge run`) therefore sets a soft memory
// limit a fifth above the budget plus a fixed allowance for everything else (connections,
// buffers, the runtime): the collector then runs as the heap nears it, and RSS stays within about
// 1.3x of memory.max_bytes. GOMEMLIMIT, when set, wins.

// memoryAllowance is what the process needs besides the memory tier.
const memoryAllowance = 64 << 20

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
// GOMEMLIMIT is set; it returns the limit it set (0: none). Call it only in a process the edge
// owns.
func (e *Edge) ApplyMemoryLimit() int64 {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	lim := MemoryLimit(e.cfg)
	if lim > 0 {
		debug.SetMemoryLimit(lim)
	}
	return lim
}
