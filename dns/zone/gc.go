package zone

import (
	"runtime"
	"runtime/metrics"
)

// Parsing makes several times the packed record's size in garbage (the lexer's tokens, the
// parsed RR). Left to the pacer (GOGC=100), it grows the heap to twice what is live, the old
// zones and the new one, before it is collected, and that, not the zones, would set a reload's
// peak. gcBound collects it once it exceeds an eighth of the live heap (at least 4 MiB): in a
// process that holds little but zones that is every few thousand records and cheap; in one with
// a large heap (the daemon's other stops) it is rarely, so the cost stays a fraction of a GC
// cycle per eighth of the heap parsed.
type gcBound struct {
	n       int
	samples []metrics.Sample
}

const (
	gcCheckEvery = 4096    // records between two looks at the heap
	gcMinGarbage = 4 << 20 // garbage always allowed
)

func newGCBound() *gcBound {
	return &gcBound{samples: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/live:bytes"}}}
}

// record counts one parsed record and collects the garbage when it is over the bound.
func (g *gcBound) record() {
	g.n++
	if g.n%gcCheckEvery != 0 {
		return
	}
	metrics.Read(g.samples)
	if g.samples[0].Value.Kind() != metrics.KindUint64 || g.samples[1].Value.Kind() != metrics.KindUint64 {
		return // a runtime without these metrics: the pacer decides
	}
	heap, live := g.samples[0].Value.Uint64(), g.samples[1].Value.Uint64()
	if heap > live && heap-live > max(gcMinGarbage, live/8) {
		runtime.GC()
	}
}
