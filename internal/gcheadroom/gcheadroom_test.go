package gcheadroom

import "testing"

// TestPercent: the edge's policy (a 64 MiB allowance, never below GOGC=100) lets a small heap
// grow by the allowance and a large one double; the DNS stop's (a 64 MiB allowance within
// 25-100) lets a large heap grow by the allowance or a quarter of it, and a small one double. A
// base below the runtime's least goal (4 MiB, which GOGC scales too) counts as 4 MiB.
func TestPercent(t *testing.T) {
	edge := Policy{Allowance: 64 << 20, MinPercent: 100}
	dns := Policy{Allowance: 64 << 20, MinPercent: 25, MaxPercent: 100}
	for _, c := range []struct {
		p    Policy
		base uint64
		want int
	}{
		{edge, 8 << 20, 800}, {edge, 4 << 20, 1600}, {edge, 64 << 20, 100}, {edge, 1 << 30, 100},
		{edge, 0, 1600}, {edge, 512 << 10, 1600},
		{dns, 8 << 20, 100}, {dns, 128 << 20, 50}, {dns, 256 << 20, 25}, {dns, 1 << 30, 25}, {dns, 0, 100},
	} {
		if got := c.p.Percent(c.base); got != c.want {
			t.Errorf("%+v.Percent(%d) = %d, want %d", c.p, c.base, got, c.want)
		}
	}
}
