package loader

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// Probe marks (enum probe_mark of bpf/probe.c): a socket marked ProbeMarkBase|n sends its packets
// through the tunnel to target n.
const (
	ProbeMarkBase = uint32(bpfobj.ProbeProbeMarkPROBE_MARK_BASE)
	ProbeMarkMask = uint32(bpfobj.ProbeProbeMarkPROBE_MARK_MASK)
	// ProbeMaxTargets is how many backends can be probed through the tunnel at once (the size of
	// probe_targets, and well inside the index bits of a mark).
	ProbeMaxTargets = 4096
)

// ProbeCounterNames names the counters of enum probe_counter_index.
var ProbeCounterNames = [bpfobj.ProbeProbeCounterIndexPCNT_MAX]string{
	bpfobj.ProbeProbeCounterIndexPCNT_ENCAP_IPIP: "probe_ipip",
	bpfobj.ProbeProbeCounterIndexPCNT_ENCAP_4IN6: "probe_4in6",
	bpfobj.ProbeProbeCounterIndexPCNT_ENCAP_6IN6: "probe_ip6ip6",
	bpfobj.ProbeProbeCounterIndexPCNT_ENCAP_6IN4: "probe_6in4",
	bpfobj.ProbeProbeCounterIndexPCNT_NO_TARGET:  "probe_no_target",
	bpfobj.ProbeProbeCounterIndexPCNT_ERROR:      "probe_error",
}

// ProbeEncap is the loaded TC program that encapsulates health probes (bpf/probe.c). It shares
// the forwarder's frame config, so probes carry the MACs and outer sources real traffic does.
type ProbeEncap struct {
	Objs bpfobj.ProbeObjects
}

// OpenProbeEncap loads the probe program with cfg, the forwarder's "config" map (Forwarder's
// Objs.Config), as its frame config. Nothing is pinned: the program lives while the daemon that
// checks through it does.
func OpenProbeEncap(cfg *ebpf.Map) (*ProbeEncap, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("load probe encap: remove memlock limit: %w", err)
	}
	spec, err := bpfobj.LoadProbe()
	if err != nil {
		return nil, fmt.Errorf("load probe encap spec: %w", err)
	}
	spec.Maps[bpfobj.ProbeMapProbeTargets].MaxEntries = ProbeMaxTargets
	var p ProbeEncap
	co := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{bpfobj.ProbeMapConfig: cfg}}
	if err := spec.LoadAndAssign(&p.Objs, co); err != nil {
		return nil, fmt.Errorf("load probe encap: %w", explainLoadError(err))
	}
	return &p, nil
}

// Attach puts the program on the egress of an interface (TCX, Linux 6.6 or later). Closing the
// link, or the process ending, takes it off.
func (p *ProbeEncap) Attach(ifname string) (link.Link, error) {
	idx, err := InterfaceIndex(ifname)
	if err != nil {
		return nil, fmt.Errorf("attach probe encap: %w", err)
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: idx, Program: p.Objs.TcProbeEncap, Attach: ebpf.AttachTCXEgress})
	if err != nil {
		return nil, fmt.Errorf("attach probe encap to the egress of %s: %w (health checks through the tunnel need TCX, Linux 6.6 or later: set health_mode: direct otherwise)", ifname, err)
	}
	return l, nil
}

// SetTargets makes probe_targets exactly want: mark -> backend tunnel address.
func (p *ProbeEncap) SetTargets(want map[uint32]netip.Addr) error {
	var k uint32
	var v bpfobj.ProbeProbeTarget
	var stale []uint32
	it := p.Objs.ProbeTargets.Iterate()
	for it.Next(&k, &v) {
		if a, ok := want[k]; !ok || probeTarget(a) != v {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read probe targets: %w", err)
	}
	for _, k := range stale {
		if err := p.Objs.ProbeTargets.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete probe target %#x: %w", k, err)
		}
	}
	for k, a := range want {
		if k&ProbeMarkMask != ProbeMarkBase {
			return fmt.Errorf("put probe target %s: mark %#x is not a probe mark (%#x/%#x)", a, k, ProbeMarkBase, ProbeMarkMask)
		}
		if err := p.Objs.ProbeTargets.Put(k, probeTarget(a)); err != nil {
			return fmt.Errorf("put probe target %s: %w", a, err)
		}
	}
	return nil
}

func probeTarget(a netip.Addr) bpfobj.ProbeProbeTarget {
	k := decapKey(a)
	return bpfobj.ProbeProbeTarget{Addr: k.Addr, Family: k.Family}
}

// Counters reads the probe counters, summed over CPUs, by name.
func (p *ProbeEncap) Counters() (map[string]bpfobj.LBCounter, error) {
	out := make(map[string]bpfobj.LBCounter, len(ProbeCounterNames))
	for i, name := range ProbeCounterNames {
		var per []bpfobj.ProbeCounter
		if err := p.Objs.ProbeCounters.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("read probe counter %s: %w", name, err)
		}
		var c bpfobj.LBCounter
		for _, x := range per {
			c.Packets += x.Packets
			c.Bytes += x.Bytes
		}
		out[name] = c
	}
	return out, nil
}

// Close releases the handles (an attached link stays until it is closed).
func (p *ProbeEncap) Close() error { return p.Objs.Close() }
