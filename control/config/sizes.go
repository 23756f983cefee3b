package config

import (
	"fmt"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps/maglev"
)

// validateSizes refuses the map sizes the loader would refuse, so that `lb config check`
// accepts only what the daemon can load.
func (c *Config) validateSizes(l locator) error {
	ring, maxVIPs := uint64(orDefault(c.RingSize, DefaultRingSize)), uint64(orDefault(c.MaxVIPs, DefaultMaxVIPs))
	if c.MaxBackends > loader.MaxBackendIDs {
		return l.errf([]any{"max_backends"}, "%d above %d: ring slots hold 16-bit backend ids; lower max_backends", c.MaxBackends, loader.MaxBackendIDs)
	}
	if ring*maxVIPs > loader.MaxRingSlots {
		return l.errf([]any{"max_vips"}, "max_vips %d x ring_size %d is %d ring slots, more than %d: lower either", maxVIPs, ring, ring*maxVIPs, uint64(loader.MaxRingSlots))
	}
	return nil
}

func orDefault(v, def uint32) uint32 {
	if v == 0 {
		return def
	}
	return v
}

// Warnings lists what loads but works worse than it could: VIPs with more backends than the
// ring serves well (fewer than maglev.MinSlotsPerBackend slots a backend: shares drift from
// their weights, and removing a backend moves several times its own slots), naming the ring size
// to use. `lb config check` prints them and the daemon logs them.
func (c *Config) Warnings() []string {
	ring := uint64(orDefault(c.RingSize, DefaultRingSize))
	worst, at := 0, -1
	for i, v := range c.VIPs {
		if len(v.Backends) > worst {
			worst, at = len(v.Backends), i
		}
	}
	if at < 0 || ring >= uint64(worst)*maglev.MinSlotsPerBackend {
		return nil
	}
	return []string{fmt.Sprintf("vips[%d] (%s) has %d backends in a ring of %d slots (%d a backend, fewer than %d): shares drift from their weights and a removal moves several times the ideal slots; use ring_size: %d (needs `lb detach` and a restart)",
		at, c.VIPs[at].Name, worst, ring, ring/uint64(worst), maglev.MinSlotsPerBackend, maglev.SizeFor(worst))}
}
