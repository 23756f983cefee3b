package edge

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// TestMemoryLimit: a byte budget gives a limit a fifth above it plus the allowance; an object
// budget gives none.
func TestMemoryLimit(t *testing.T) {
	if got := MemoryLimit(Config{Memory: MemoryConfig{MaxBytes: 1 << 30}}); got != 1<<30+(1<<30)/5+memoryAllowance {
		t.Fatalf("1 GiB budget: limit %d", got)
	}
	if got := MemoryLimit(Config{Memory: MemoryConfig{MaxObjects: 1000}}); got != 0 {
		t.Fatalf("object budget: limit %d, want none", got)
	}
}

// TestApplyMemoryLimitHeadroom: with the limit set, 32 MiB of garbage over a small live heap
// is not collected every few MiB (GOGC=100 would collect it about ten times); Close puts GOGC
// back; a GOGC set in the environment is left alone.
func TestApplyMemoryLimitHeadroom(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	t.Setenv("GOGC", "")
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64); debug.SetGCPercent(100) })
	runtime.GC()
	e := &Edge{cfg: Config{Memory: MemoryConfig{MaxBytes: 256 << 20}}}
	if lim := e.ApplyMemoryLimit(); lim != MemoryLimit(e.cfg) {
		t.Fatalf("limit %d, want %d", lim, MemoryLimit(e.cfg))
	}
	if n := gcCycles(func() { garbage(32 << 20) }); n > 1 {
		t.Fatalf("%d collections for 32 MiB of garbage over a small live heap, want at most 1", n)
	}
	e.gcStop()
	waitGCPercent(t, 100)

	t.Setenv("GOGC", "100")
	e = &Edge{cfg: e.cfg}
	e.ApplyMemoryLimit()
	if gcPercent() != 100 {
		t.Fatalf("GOGC set in the environment: headroom kept anyway (GOGC now %d)", gcPercent())
	}
}

// gcCycles is how many collections f ran into.
func gcCycles(f func()) uint64 {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	before := s[0].Value.Uint64()
	f()
	metrics.Read(s)
	return s[0].Value.Uint64() - before
}

var garbageSink []byte

// garbage allocates n bytes in 8 KiB pieces, each dropped at once.
func garbage(n int) {
	for i := 0; i < n; i += 8 << 10 {
		garbageSink = make([]byte, 8<<10)
	}
	garbageSink = nil
}

// gcPercent is the runtime's GOGC (read, not set: the headroom's goroutine may be setting it).
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// waitGCPercent waits (up to 2 s) for GOGC to be want: the headroom's goroutine puts it back.
func waitGCPercent(t *testing.T, want int) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); gcPercent() != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC %d after Close, want %d", gcPercent(), want)
		}
	}
}
