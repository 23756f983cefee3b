package config

import (
	"github.com/switchyard/switchyard/internal/layout"
	"github.com/switchyard/switchyard/internal/maglev"
)

// Ring sizing modes (ring_sizing).
const (
	// RingSizingAuto sizes each VIP's ring from its backend count (maglev.AutoSize), at most
	// ring_size: small pools get small rings, which build fast and cost little pinned memory.
	RingSizingAuto = "auto"
	// RingSizingFixed gives every VIP the ring_size (the behaviour before per-VIP rings).
	RingSizingFixed = "fixed"
	// DefaultSlotsPerVIP is the ring space a VIP is given by default beyond what the
	// configuration needs at the first start: maglev.AutoSize(32).
	DefaultSlotsPerVIP = 3203
)

// VIPRingSize is the size of a VIP's ring: its own ring_size, else (ring_sizing auto) the
// automatic size of its backend count capped by the file's ring_size, else the file's ring_size.
func (c *Config) VIPRingSize(v *VIP) uint32 {
	if v.RingSize != 0 {
		return v.RingSize
	}
	limit := orDefault(c.RingSize, DefaultRingSize)
	if c.RingSizing == RingSizingFixed {
		return limit
	}
	return uint32(min(maglev.AutoSize(len(v.Backends)), uint64(limit)))
}

// RingSlotsNeeded is the sum of every VIP's ring size.
func (c *Config) RingSlotsNeeded() uint64 {
	var n uint64
	for i := range c.VIPs {
		n += uint64(c.VIPRingSize(&c.VIPs[i]))
	}
	return n
}

// RingSlotsFor is how many slots the ring maps are made with: ring_slots when set, else the
// size of the maps already pinned (pinned, 0 when none) when they hold what the VIPs need, else
// the default: with ring_sizing fixed max_vips x ring_size (as before per-VIP rings), else twice
// what the VIPs need and at least max_vips x DefaultSlotsPerVIP, at most what one map holds.
func (c *Config) RingSlotsFor(pinned uint32) uint32 {
	if c.RingSlots != 0 {
		return c.RingSlots
	}
	need := c.RingSlotsNeeded()
	if pinned != 0 && uint64(pinned) >= need {
		return pinned
	}
	maxVIPs := uint64(orDefault(c.MaxVIPs, DefaultMaxVIPs))
	if c.RingSizing == RingSizingFixed {
		return uint32(min(maxVIPs*uint64(orDefault(c.RingSize, DefaultRingSize)), layout.MaxRingSlots))
	}
	return uint32(min(max(2*need, maxVIPs*DefaultSlotsPerVIP), layout.MaxRingSlots))
}

// validateRingFields checks ring_sizing and ring_slots.
func (c *Config) validateRingFields(l locator) error {
	switch c.RingSizing {
	case "", RingSizingAuto, RingSizingFixed:
	default:
		return l.errf([]any{"ring_sizing"}, "unknown mode %q: use auto (each VIP's ring sized from its backends) or fixed (every ring ring_size)", c.RingSizing)
	}
	if uint64(c.RingSlots) > layout.MaxRingSlots {
		return l.errf([]any{"ring_slots"}, "%d above %d: lower ring_slots", c.RingSlots, uint64(layout.MaxRingSlots))
	}
	if c.RingSlots != 0 {
		if need := c.RingSlotsNeeded(); need > uint64(c.RingSlots) {
			return l.errf([]any{"ring_slots"}, "the VIPs' rings need %d slots, more than ring_slots %d: raise ring_slots (needs `lb detach` and a restart), or give VIPs smaller ring_size", need, c.RingSlots)
		}
	}
	return nil
}
