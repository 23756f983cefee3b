package edge

import (
	"os"
	"runtime/debug"

	"github.com/switchyard/switchyard/internal/gcheadroom"
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
// limit already counts before it collects (gcheadroom, GOGC never below 100); the limit still
// bounds the whole. GOGC, when set, wins.

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
	if e.gcStop == nil {
		e.gcStop = gcheadroom.Hold(gcPolicy)
	}
	return lim
}

// gcPolicy is the edge's collector headroom: the limit's allowance, never less than GOGC=100.
var gcPolicy = gcheadroom.Policy{Allowance: memoryAllowance, MinPercent: 100}
