package daemon

import (
	"fmt"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/loader"
)

// ringSlots is the size of the ring maps to load (config.RingSlotsFor), refusing with the fix a
// start whose VIPs need more ring space than the pinned maps hold: the maps cannot grow while
// pinned.
func ringSlots(cfg *config.Config) (uint32, error) {
	pinned := loader.PinnedRingSlots(cfg.PinDir)
	slots := cfg.RingSlotsFor(pinned)
	if pinned != 0 && loader.SlotWords(uint64(slots)) != loader.SlotWords(uint64(pinned)) {
		need := cfg.RingSlotsNeeded()
		if cfg.RingSlots == 0 || uint64(pinned) < need {
			return 0, fmt.Errorf("the ring maps pinned in %s hold %d slots, the VIPs' rings need %d: give VIPs smaller ring_size, or set ring_slots (at least %d) and run `switchyard lb detach` first (this drops established flows)", loader.MapsDir(cfg.PinDir), pinned, need, need)
		}
		return 0, fmt.Errorf("ring_slots %d, the ring maps pinned in %s hold %d: put ring_slots back (or leave it out), or run `switchyard lb detach` first (this drops established flows)", cfg.RingSlots, loader.MapsDir(cfg.PinDir), pinned)
	}
	return slots, nil
}
