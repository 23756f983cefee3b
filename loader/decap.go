package loader

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// DecapCounterNames mirrors enum decap_counter_index in bpf/include/consts.h.
var DecapCounterNames = []string{"decap_ipip", "decap_ip6ip6", "decap_4in6", "pass", "drop"}

// DecapSecondChanceNames mirrors enum decap_sc_counter_index in bpf/include/consts.h: what became
// of tunnel packets that carried a second candidate (docs/xdp.md, "Second chance").
var DecapSecondChanceNames = []string{
	"second_chance_owned", "second_chance_forwarded", "second_chance_no_candidate",
	"second_chance_skipped", "second_chance_malformed",
}

// Decap is a loaded decapsulation program.
type Decap struct {
	Objs DecapObjects
}

// OpenDecap loads the decap program. With pinDir its maps are pinned there (and reused).
func OpenDecap(pinDir string) (*Decap, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("load decap: remove memlock limit: %w", err)
	}
	spec, err := LoadDecap()
	if err != nil {
		return nil, fmt.Errorf("load decap spec: %w", err)
	}
	var co ebpf.CollectionOptions
	if pinDir != "" {
		if err := EnsureBPFFS(pinDir); err != nil {
			return nil, fmt.Errorf("load decap: %w", err)
		}
		dir := DecapMapsDir(pinDir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create pin directory %s: %w", dir, err)
		}
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinByName
		}
		co.Maps.PinPath = dir
	}
	var d Decap
	if err := spec.LoadAndAssign(&d.Objs, &co); err != nil {
		return nil, fmt.Errorf("load decap: %w", explainLoadError(err))
	}
	return &d, nil
}

// OpenDecapPinned opens the maps a decap program pinned under pinDir (its counters, addresses and
// allow-lists) without loading a program or creating anything: for reading a running decap.
func OpenDecapPinned(pinDir string) (*Decap, error) {
	dir := DecapMapsDir(pinDir)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("open decap pins: no maps under %s: attach decap first (switchyard lb decap --iface IF --addr A) or give its --pin-dir", dir)
	}
	var d Decap
	for _, m := range []struct {
		name string
		to   **ebpf.Map
	}{
		{DecapMapDecapAddrs, &d.Objs.DecapAddrs}, {DecapMapDecapCounters, &d.Objs.DecapCounters},
		{DecapMapDecapScCounters, &d.Objs.DecapScCounters}, {DecapMapDecapScRefused, &d.Objs.DecapScRefused},
		{DecapMapDecapScPeers, &d.Objs.DecapScPeers}, {DecapMapDecapScSources, &d.Objs.DecapScSources},
	} {
		mp, err := ebpf.LoadPinnedMap(filepath.Join(dir, m.name), nil)
		if err != nil {
			d.Close()
			if errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("open decap pins: no map %s under %s: an older switchyard attached it: run switchyard lb decap again to update it", m.name, dir)
			}
			return nil, fmt.Errorf("open decap pins: %s: %w", m.name, err)
		}
		*m.to = mp
	}
	return &d, nil
}

// SetAddrs makes the set of tunnel addresses this host accepts exactly addrs.
func (d *Decap) SetAddrs(addrs []netip.Addr) error {
	want := map[DecapDecapKey]bool{}
	for _, a := range addrs {
		want[decapKey(a)] = true
	}
	var k DecapDecapKey
	var v uint32
	var stale []DecapDecapKey
	it := d.Objs.DecapAddrs.Iterate()
	for it.Next(&k, &v) {
		if !want[k] {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		if err := d.Objs.DecapAddrs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete decap address: %w", err)
		}
	}
	for k := range want {
		if err := d.Objs.DecapAddrs.Put(k, uint32(1)); err != nil {
			return fmt.Errorf("put decap address: %w", err)
		}
	}
	return nil
}

func decapKey(a netip.Addr) DecapDecapKey {
	a = a.Unmap()
	var k DecapDecapKey
	if a.Is4() {
		b := a.As4()
		k.Addr[0] = uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k.Family = 4
		return k
	}
	b := a.As16()
	for i := 0; i < 4; i++ {
		k.Addr[i] = uint32(b[i*4]) | uint32(b[i*4+1])<<8 | uint32(b[i*4+2])<<16 | uint32(b[i*4+3])<<24
	}
	k.Family = 6
	return k
}

// Counters reads the decap counters and the second-chance counters, summed over CPUs, by name;
// "second_chance_refused" is the sum of the refused reasons.
func (d *Decap) Counters() (map[string]LBCounter, error) {
	out := map[string]LBCounter{}
	for _, set := range []struct {
		m     *ebpf.Map
		names []string
	}{{d.Objs.DecapCounters, DecapCounterNames}, {d.Objs.DecapScCounters, DecapSecondChanceNames},
		{d.Objs.DecapScRefused, DecapRefusedNames}} {
		for i, name := range set.names {
			var per []DecapCounter
			if err := set.m.Lookup(uint32(i), &per); err != nil {
				return nil, fmt.Errorf("read decap counter %s: %w", name, err)
			}
			var c LBCounter
			for _, p := range per {
				c.Packets += p.Packets
				c.Bytes += p.Bytes
			}
			out[name] = c
		}
	}
	var refused LBCounter
	for _, name := range DecapRefusedNames {
		refused.Packets += out[name].Packets
		refused.Bytes += out[name].Bytes
	}
	out["second_chance_refused"] = refused
	return out, nil
}

// Attach attaches the decap program to an interface, pinning the link under pinDir when given.
func (d *Decap) Attach(ifname string, mode Mode, pinDir string) (link.Link, error) {
	lp := ""
	if pinDir != "" {
		lp = LinkPath(pinDir)
	}
	l, _, err := AttachOrUpdate(d.Objs.XdpDecap, ifname, mode, lp)
	return l, err
}

// Close releases the handles (pins stay).
func (d *Decap) Close() error { return d.Objs.Close() }

// AttachPass attaches the XDP_PASS program to an interface (pinning the link at linkPath when
// given). A veth drops frames another veth sends it with XDP_TX unless the receiving side runs an
// XDP program; this is that program.
func AttachPass(ifname string, mode Mode, linkPath string) (link.Link, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("attach pass: remove memlock limit: %w", err)
	}
	var objs PassObjects
	if err := LoadPassObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("load pass program: %w", explainLoadError(err))
	}
	defer objs.Close()
	l, _, err := AttachOrUpdate(objs.XdpPass, ifname, mode, linkPath)
	return l, err
}
