package config

import (
	"fmt"

	"github.com/switchyard/switchyard/internal/layout"
	"github.com/switchyard/switchyard/internal/maglev"
)

// validateSizes refuses the map sizes the loader would refuse, so that `lb config check`
// accepts only what the daemon can load.
func (c *Config) validateSizes(l locator) error {
	ring, maxVIPs := uint64(orDefault(c.RingSize, DefaultRingSize)), uint64(orDefault(c.MaxVIPs, DefaultMaxVIPs))
	if c.MaxBackends > layout.MaxBackendIDs {
		return l.errf([]any{"max_backends"}, "%d above %d: ring slots hold 16-bit backend ids; lower max_backends", c.MaxBackends, layout.MaxBackendIDs)
	}
	if maxVIPs > layout.GuardScopeGlobal {
		return l.errf([]any{"max_vips"}, "%d above %d: VIP ids are 16-bit in the connection table, and %d names the guard's global rules; lower max_vips", maxVIPs, layout.GuardScopeGlobal, layout.GuardScopeGlobal)
	}
	if c.RingSizing == RingSizingFixed && c.RingSlots == 0 && ring*maxVIPs > layout.MaxRingSlots {
		return l.errf([]any{"max_vips"}, "max_vips %d x ring_size %d is %d ring slots, more than %d: lower either, or use ring_sizing: auto", maxVIPs, ring, ring*maxVIPs, uint64(layout.MaxRingSlots))
	}
	return nil
}

func orDefault(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return v
}

// Warnings lists what loads but works worse than it could: VIPs whose ring has fewer than
// maglev.MinSlotsPerBackend slots a backend (shares drift from their weights, and removing a
// backend moves several times its own slots), naming the ring size to use. `lb config check`
// prints them and the daemon logs them; the worst VIP is named.
func (c *Config) Warnings() []string {
	worst, at := 0.0, -1
	for i := range c.VIPs {
		v := &c.VIPs[i]
		n := len(v.Backends)
		if n == 0 {
			continue
		}
		ring := c.VIPRingSize(v)
		if uint64(ring) >= uint64(n)*maglev.MinSlotsPerBackend {
			continue
		}
		if r := float64(n) / float64(ring); r > worst {
			worst, at = r, i
		}
	}
	if at < 0 {
		return nil
	}
	v := &c.VIPs[at]
	n, ring := len(v.Backends), uint64(c.VIPRingSize(v))
	return []string{fmt.Sprintf("vips[%d] (%s) has %d backends in a ring of %d slots (%d a backend, fewer than %d): shares drift from their weights and a removal moves several times the ideal slots; use ring_size: %d (on the VIP, or as the file's ring_size cap)",
		at, v.Name, n, ring, ring/uint64(n), maglev.MinSlotsPerBackend, maglev.NextPrime(uint64(n)*maglev.MinSlotsPerBackend))}
}
