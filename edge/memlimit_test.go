package edge

import "testing"

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
