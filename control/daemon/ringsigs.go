package daemon

import (
	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// openRingSigs opens the ring-signature map and hands it to the Set, voided unless the program
// attached now is the one that recorded it (loader.TrustRingSigs): with it, an adopting daemon
// builds only the rings whose input changed while it was down.
func openRingSigs(fwd *loader.Forwarder, set *maps.Set) (*ebpf.Map, error) {
	sigs, err := loader.OpenRingSigs(fwd.Opts)
	if err != nil {
		return nil, err
	}
	if err := loader.TrustRingSigs(sigs, fwd.Opts.PinDir); err != nil {
		sigs.Close()
		return nil, err
	}
	if err := set.UseRingSigs(sigs); err != nil {
		sigs.Close()
		return nil, err
	}
	return sigs, nil
}
