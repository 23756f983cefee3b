package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// RingSigsName is the pinned map, beside the forwarder's, where the control plane records per
// VIP id the signature of the input its ring was built from (control/reconcile), so that a
// restarted daemon rebuilds no ring that is already right. The program never reads it: it is
// created here, not in the BPF object, and adding it changed no layout.
const RingSigsName = "ring_sigs"

// OpenRingSigs opens the ring-signature map pinned with the forwarder's maps, or creates it
// (pinned when the forwarder is). It holds maxVIPs signatures and, in slot maxVIPs, the id of the
// program that was attached when they were last known to be right (see TrustRingSigs).
//
// The signatures can only be trusted while no other binary wrote the rings: one that does not
// know this map (an older switchyard) swaps its own program in, so a program id other than the
// recorded one voids every signature, and the next daemon builds every ring once.
func OpenRingSigs(opts Options) (*ebpf.Map, error) {
	if err := opts.defaults(); err != nil {
		return nil, fmt.Errorf("open ring signatures: %w", err)
	}
	spec := &ebpf.MapSpec{Name: RingSigsName, Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: opts.MaxVIPs + 1}
	var mo ebpf.MapOptions
	if opts.PinDir != "" {
		spec.Pinning = ebpf.PinByName
		mo.PinPath = MapsDir(opts.PinDir)
	}
	m, err := ebpf.NewMapWithOptions(spec, mo)
	if errors.Is(err, ebpf.ErrMapIncompatible) {
		// Made for another max_vips: the rings it described are of another size too.
		_ = os.Remove(filepath.Join(mo.PinPath, RingSigsName))
		m, err = ebpf.NewMapWithOptions(spec, mo)
	}
	if err != nil {
		return nil, fmt.Errorf("open ring signatures: %w", err)
	}
	return m, nil
}

// TrustRingSigs voids every signature unless the program attached through the pinned link (none
// when pinDir is empty or nothing is attached) is the one recorded with them. Call it before the
// new program is attached; StampRingSigs after.
func TrustRingSigs(m *ebpf.Map, pinDir string) error {
	var attached uint64
	if pinDir != "" {
		if l, err := link.LoadPinnedLink(LinkPath(pinDir), nil); err == nil {
			if info, err := l.Info(); err == nil {
				attached = uint64(info.Program)
			}
			l.Close()
		}
	}
	last := m.MaxEntries() - 1
	var rec uint64
	if err := m.Lookup(last, &rec); err != nil {
		return fmt.Errorf("read ring signatures: %w", err)
	}
	if rec == attached {
		return nil
	}
	for id := uint32(0); id <= last; id++ {
		if err := m.Put(id, uint64(0)); err != nil {
			return fmt.Errorf("void ring signatures: %w", err)
		}
	}
	return nil
}

// StampRingSigs records the program now attached as the one the signatures hold for.
func StampRingSigs(m *ebpf.Map, prog *ebpf.Program) error {
	info, err := prog.Info()
	if err != nil {
		return fmt.Errorf("stamp ring signatures: %w", err)
	}
	id, ok := info.ID()
	if !ok {
		return errors.New("stamp ring signatures: the kernel gives no program id")
	}
	if err := m.Put(m.MaxEntries()-1, uint64(id)); err != nil {
		return fmt.Errorf("stamp ring signatures: %w", err)
	}
	return nil
}
