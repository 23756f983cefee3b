package dns

import (
	"runtime/debug"

	"github.com/switchyard/switchyard/internal/gcheadroom"
)

// releaseOld returns the memory of the zones a reload replaced to the kernel at once; without
// it the runtime keeps the reload's peak (old + new zones, about twice the zone) resident for
// minutes: 2.2x the zone's size after reloading a 1M-record zone. The caller has dropped its
// last reference to the old state; queries still in flight on it keep it alive until they end.
func releaseOld() { debug.FreeOSMemory() }

// GCHeadroom is the collector's headroom for a process that serves DNS alone (`dns run`):
// zones are most of its heap and long-lived, and GOGC=100 let the heap grow by as much again
// before a collection, twice the zones' memory in RSS. It grows by 64 MiB, or a quarter of what
// is live when that is more: a server of a few MB of zones is unchanged (GOGC 100), 100,000
// small zones keep about a quarter more than their data instead of double. The cost is more
// collections of a large heap when answers allocate (cache misses): cached answers allocate
// nothing.
var GCHeadroom = gcheadroom.Policy{Allowance: 64 << 20, MinPercent: 25, MaxPercent: 100}
