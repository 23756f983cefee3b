package config

import (
	"fmt"
	"testing"
)

// TestVIPRingSize: a VIP's ring is sized from its backends (at least 100 slots a backend, the
// count rounded up to a power of two, a prime), capped by ring_size; its own ring_size wins, and
// ring_sizing: fixed gives every other VIP the file's ring_size.
func TestVIPRingSize(t *testing.T) {
	c := &Config{Interface: "eth0"}
	vipOf := func(n int, own uint32) *VIP {
		v := &VIP{Address: "198.18.0.1", Port: 80, RingSize: own}
		for i := 0; i < n; i++ {
			v.Backends = append(v.Backends, Backend{Address: fmt.Sprintf("10.0.%d.%d", i/250, 1+i%250)})
		}
		return v
	}
	for _, tc := range []struct {
		n    int
		own  uint32
		want uint32
	}{{0, 0, 101}, {1, 0, 101}, {16, 0, 1601}, {17, 0, 3203}, {1000, 0, 65537}, {16, 251, 251}} {
		if got := c.VIPRingSize(vipOf(tc.n, tc.own)); got != tc.want {
			t.Errorf("%d backends, ring_size %d: ring %d, want %d", tc.n, tc.own, got, tc.want)
		}
	}
	c.RingSize = 131071
	if got := c.VIPRingSize(vipOf(1000, 0)); got != 102407 {
		t.Errorf("1000 backends under a cap of 131071: ring %d, want 102407", got)
	}
	c.RingSizing = RingSizingFixed
	if got := c.VIPRingSize(vipOf(16, 0)); got != 131071 {
		t.Errorf("fixed: ring %d, want ring_size 131071", got)
	}
	if got := c.VIPRingSize(vipOf(16, 251)); got != 251 {
		t.Errorf("fixed with the VIP's own ring_size 251: ring %d", got)
	}
}

// TestRingSlotsFor: ring_slots when given; else the pinned maps' size while it holds the VIPs;
// else twice what the VIPs need, at least max_vips x DefaultSlotsPerVIP.
func TestRingSlotsFor(t *testing.T) {
	c := &Config{Interface: "eth0", MaxVIPs: 4}
	for i := 0; i < 3; i++ {
		v := VIP{Address: fmt.Sprintf("198.18.0.%d", i+1), Port: 80}
		for j := 0; j < 16; j++ {
			v.Backends = append(v.Backends, Backend{Address: fmt.Sprintf("10.0.%d.%d", i, j+1)})
		}
		c.VIPs = append(c.VIPs, v)
	}
	if need := c.RingSlotsNeeded(); need != 3*1601 {
		t.Fatalf("need %d, want 3 x 1601", need)
	}
	if got := c.RingSlotsFor(0); got != 4*DefaultSlotsPerVIP {
		t.Errorf("default %d, want 4 x %d", got, DefaultSlotsPerVIP)
	}
	if got := c.RingSlotsFor(5000); got != 5000 {
		t.Errorf("pinned 5000 (holds 4803): %d, want 5000 kept", got)
	}
	if got := c.RingSlotsFor(4000); got != 4*DefaultSlotsPerVIP {
		t.Errorf("pinned 4000 (too small): %d, want the default", got)
	}
	c.MaxVIPs = 1
	if got := c.RingSlotsFor(0); got != 2*3*1601 {
		t.Errorf("default past max_vips x %d: %d, want twice the need", DefaultSlotsPerVIP, got)
	}
	c.RingSlots = 9000
	if got := c.RingSlotsFor(5000); got != 9000 {
		t.Errorf("ring_slots 9000: %d", got)
	}
}
