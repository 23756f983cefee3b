// Package gcheadroom keeps the Go collector's GOGC at the share of what it scans (the live
// heap, stacks and globals) that lets the heap grow by a chosen amount before the next
// collection, instead of GOGC=100's "as much again as is live". A stop chooses by what it holds:
// the edge, a small live heap under a memory limit, grows by its fixed allowance rather than
// collecting every few MB (many times a second under TLS handshakes); the DNS stop, whose zones
// are most of its heap, grows by a fraction of them rather than by as much again (100,000 zones
// would otherwise cost twice their memory). A process sets one Policy at most.
package gcheadroom

import (
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Policy is how far the heap may grow past what the collector scans before the next
// collection: Allowance bytes, as a GOGC kept within [MinPercent, MaxPercent] (MaxPercent 0: no
// upper bound).
type Policy struct {
	Allowance              uint64
	MinPercent, MaxPercent int
}

// every is how often Hold re-reads what the collector scans.
const every = time.Second

// minBase is the runtime's least heap goal, which scales with GOGC too: a base below it counts
// as it, so a tiny heap's goal is about the allowance.
const minBase = 4 << 20

// Percent is the GOGC that lets the heap grow by p.Allowance past base bytes scanned.
func (p Policy) Percent(base uint64) int {
	pct := max(p.MinPercent, int(p.Allowance*100/max(base, minBase)))
	if p.MaxPercent > 0 {
		pct = min(pct, p.MaxPercent)
	}
	return pct
}

// Hold keeps GOGC at p.Percent of what the collector scans, re-read every second, until stop is
// called, which puts back the GOGC before. A GOGC set in the environment wins: Hold then does
// nothing.
func Hold(p Policy) (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	done := make(chan struct{})
	prev := debug.SetGCPercent(p.Percent(base()))
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				debug.SetGCPercent(prev)
				return
			case <-t.C:
				debug.SetGCPercent(p.Percent(base()))
			}
		}
	}()
	return func() { close(done) }
}

// base is what the last collection found to scan: the live heap, the goroutine stacks and the
// globals, the base GOGC is a share of.
func base() uint64 {
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
