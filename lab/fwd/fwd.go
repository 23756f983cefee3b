// Package fwd drives switchyard's XDP forwarder directly through loader and maps, without the
// control-plane daemon: it loads and attaches the program in a balancer namespace, writes the
// configuration, and puts VIPs with their backends (Maglev rings built by internal/maglev). The lab
// uses it for tests and experiments that need a forwarder but not the daemon's health checks or
// API, and to measure the data plane alone.
package fwd

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/switchyard/switchyard/internal/maglev"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// Options place and size the forwarder.
type Options struct {
	// NS and Iface are the balancer's namespace and interface.
	NS    string
	Iface string
	// PinDir pins maps and link (empty: nothing pinned, the program goes when Close is called).
	PinDir string
	// Mode is the XDP attach mode (native by default: veth supports it).
	Mode loader.Mode
	// RingSize is the Maglev ring size (a prime); default 65537.
	RingSize uint32
	// NextHopMAC is the router's MAC on the balancer's segment.
	NextHopMAC net.HardwareAddr
	// MTU of the path toward the backends; default 1500.
	MTU uint16
	// Src4, Src6 are the outer source bases.
	Src4, Src6 netip.Addr
}

// Forwarder is a loaded, attached forwarder with its maps.
type Forwarder struct {
	opt  Options
	f    *loader.Forwarder
	link link.Link
	// Maps is the typed access to the forwarder's maps.
	Maps *maps.Set
	ids  map[netip.Addr]uint32
}

// Start loads the forwarder in the namespace, attaches it to the interface and writes its
// configuration.
func Start(opt Options) (*Forwarder, error) {
	if opt.RingSize == 0 {
		opt.RingSize = 65537
	}
	if opt.MTU == 0 {
		opt.MTU = 1500
	}
	if opt.Mode == "" {
		opt.Mode = loader.Native
	}
	ifMAC, err := topo.MAC(opt.NS, opt.Iface)
	if err != nil {
		return nil, err
	}
	fw := &Forwarder{opt: opt, ids: map[netip.Addr]uint32{}}
	err = namednetns.DoNamed(opt.NS, func() error {
		f, err := loader.LoadForwarder(loader.Options{PinDir: opt.PinDir, RingSize: opt.RingSize, MaxVIPs: 16, MaxBackends: 256})
		if err != nil {
			return err
		}
		fw.f = f
		l, _, err := f.Attach(opt.Iface, opt.Mode)
		if err != nil {
			f.Close()
			return err
		}
		fw.link = l
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("start forwarder in %s: %w", opt.NS, err)
	}
	if fw.Maps, err = maps.New(&fw.f.Objs.LBMaps, opt.RingSize); err != nil {
		fw.Close()
		return nil, err
	}
	// Keep the backend ids of a reused (pinned) set, so that a restart does not renumber them.
	if bes, err := fw.Maps.Backends(); err == nil {
		for _, b := range bes {
			fw.ids[b.Addr] = b.ID
		}
	}
	cfg := maps.Config{
		IfMAC: ifMAC, NextHopMAC: opt.NextHopMAC, MTU: opt.MTU,
		Src4: opt.Src4, Src4HashBits: 8, Src6: opt.Src6,
		UDPTimeout: 30 * time.Second, ICMPTooBig: true,
	}
	if err := fw.Maps.SetConfig(cfg); err != nil {
		fw.Close()
		return nil, err
	}
	return fw, nil
}

// Backend is a backend address with a Maglev weight (0 leaves it out of the ring but keeps its
// slot, which is how a drain lets established flows finish).
type Backend struct {
	Addr   netip.Addr
	Weight uint32
}

// BackendID returns (assigning when new) the backend slot of an address.
func (fw *Forwarder) BackendID(a netip.Addr) (uint32, error) {
	if id, ok := fw.ids[a]; ok {
		return id, nil
	}
	used := map[uint32]bool{}
	for _, id := range fw.ids {
		used[id] = true
	}
	for id := uint32(1); id < fw.Maps.MaxBackends(); id++ {
		if !used[id] {
			if err := fw.Maps.PutBackend(maps.Backend{ID: id, Addr: a}); err != nil {
				return 0, err
			}
			if err := fw.Maps.ResetBackendStats(id); err != nil {
				return 0, err
			}
			fw.ids[a] = id
			return id, nil
		}
	}
	return 0, errors.New("assign backend id: every slot is taken")
}

// SetVIP puts a VIP and makes its ring the Maglev table of the backends.
func (fw *Forwarder) SetVIP(key maps.VIPKey, id uint32, flags maps.VIPFlags, backends []Backend) error {
	mb := make([]maglev.Backend, 0, len(backends))
	for _, b := range backends {
		bid, err := fw.BackendID(b.Addr)
		if err != nil {
			return err
		}
		mb = append(mb, maglev.Backend{ID: bid, Identity: b.Addr.String(), Weight: b.Weight})
	}
	table, err := maglev.Build(mb, uint64(fw.opt.RingSize))
	if err != nil {
		return fmt.Errorf("set vip %s: %w", key, err)
	}
	old, err := fw.Maps.Ring(id)
	if err != nil {
		old = nil
	}
	// As control/reconcile does: a table that changes leaves the old one as the previous ring,
	// the second-chance candidates (written first).
	if old != nil && !slices.Equal(old, table) {
		if _, err := fw.Maps.WritePrevRing(id, nil, old); err != nil {
			return err
		}
	}
	if _, err := fw.Maps.WriteRing(id, old, table); err != nil {
		return err
	}
	return fw.Maps.PutVIP(maps.VIP{Key: key, ID: id, Flags: flags})
}

// SetSecondChance turns second chance on or off in the forwarder's configuration (off after
// Start).
func (fw *Forwarder) SetSecondChance(on bool) error {
	c, err := fw.Maps.Config()
	if err != nil {
		return err
	}
	c.SecondChance = on
	return fw.Maps.SetConfig(c)
}

// BackendAddrs maps backend ids to addresses.
func (fw *Forwarder) BackendAddrs() map[uint32]netip.Addr {
	out := map[uint32]netip.Addr{}
	for a, id := range fw.ids {
		out[id] = a
	}
	return out
}

// Program returns the loaded forwarder (its program's run-time stats give the CPU it uses).
func (fw *Forwarder) Program() *loader.Forwarder { return fw.f }

// Close releases the handles. Without a pin directory this detaches the program too; with one
// the program stays attached (see Detach).
func (fw *Forwarder) Close() error {
	var errs []error
	if fw.link != nil {
		errs = append(errs, fw.link.Close())
	}
	if fw.f != nil {
		errs = append(errs, fw.f.Close())
	}
	return errors.Join(errs...)
}
