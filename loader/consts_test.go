package loader

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// enumValue reads one constant of a C enum from the BTF of a compiled object (not from the Go that
// bpf2go generated), so a Go side that drifted from the object is seen.
func enumValue(t *testing.T, spec *ebpf.CollectionSpec, enum, name string) uint64 {
	t.Helper()
	var e *btf.Enum
	if err := spec.Types.TypeByName(enum, &e); err != nil {
		t.Fatalf("enum %s in the object's BTF: %v (is it listed in struct go_types?)", enum, err)
	}
	for _, v := range e.Values {
		if v.Name == name {
			return v.Value
		}
	}
	t.Fatalf("enum %s has no %s", enum, name)
	return 0
}

// checkNames checks a list of counter names against its C enum and per-CPU array: one non-empty,
// distinct name for every index below the enum's *_MAX, and the map sized to match.
func checkNames(t *testing.T, spec *ebpf.CollectionSpec, enum, max, mapName string, names []string) {
	t.Helper()
	n := enumValue(t, spec, enum, max)
	if uint64(len(names)) != n {
		t.Errorf("%d names for enum %s, whose %s is %d: run `make generate`", len(names), enum, max, n)
	}
	if got := spec.Maps[mapName].MaxEntries; uint64(got) != n {
		t.Errorf("map %s holds %d entries, enum %s's %s is %d: size it by %s", mapName, got, enum, max, n, max)
	}
	seen := map[string]int{}
	for i, name := range names {
		if name == "" {
			t.Errorf("enum %s index %d has no Go name: name it in the Go list of %s", enum, i, mapName)
		} else if j, dup := seen[name]; dup {
			t.Errorf("enum %s indexes %d and %d are both named %q", enum, j, i, name)
		}
		seen[name] = i
	}
}

// TestDecapCounterNamesCoverEnums checks the decap counter names against the enums of the
// compiled decap object (maps.TestCounterNamesCoverEnums does the forwarder's).
func TestDecapCounterNamesCoverEnums(t *testing.T) {
	spec, err := bpfobj.LoadDecap()
	if err != nil {
		t.Fatal(err)
	}
	checkNames(t, spec, "decap_counter_index", "DCNT_MAX", bpfobj.DecapMapDecapCounters, DecapCounterNames[:])
	checkNames(t, spec, "decap_sc_counter_index", "DSC_MAX", bpfobj.DecapMapDecapScCounters, DecapSecondChanceNames[:])
	checkNames(t, spec, "decap_sc_refused_index", "DSCR_MAX", bpfobj.DecapMapDecapScRefused, DecapRefusedNames[:])
	for _, m := range []string{bpfobj.DecapMapDecapScPeers, bpfobj.DecapMapDecapScSources} {
		if got := spec.Maps[m].MaxEntries; int(got) != SecondChancePrefixMax {
			t.Errorf("map %s holds %d prefixes, SecondChancePrefixMax is %d", m, got, SecondChancePrefixMax)
		}
	}
}

// TestDefaultsSizeTheObject checks that Options' defaults are the sizes the object declares, so
// that a forwarder loaded with no options has the maps the C describes.
func TestDefaultsSizeTheObject(t *testing.T) {
	spec, err := bpfobj.LoadLB()
	if err != nil {
		t.Fatal(err)
	}
	var o Options
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{
		bpfobj.LBMapVips: o.MaxVIPs, bpfobj.LBMapVipStats: o.MaxVIPs, bpfobj.LBMapVipAddrs: o.MaxVIPs, bpfobj.LBMapVipGens: o.MaxVIPs,
		bpfobj.LBMapBackends: o.MaxBackends, bpfobj.LBMapBackendStats: o.MaxBackends,
		bpfobj.LBMapConntrack4: o.ConnTableSize, bpfobj.LBMapConntrack: o.ConnTable6Size,
		bpfobj.LBMapRings16: RingWords(o.MaxVIPs, o.RingSize), bpfobj.LBMapPrevRings16: RingWords(o.MaxVIPs, o.RingSize),
	} {
		if got := spec.Maps[name].MaxEntries; got != want {
			t.Errorf("map %s: object declares %d entries, Options defaults give %d", name, got, want)
		}
	}
	// maps/mapped.go reads a ring value as RingWordSlots 16-bit ids.
	if got := spec.Maps[bpfobj.LBMapRings16].ValueSize; got != 2*uint32(RingWordSlots) {
		t.Errorf("rings16 values are %d bytes, RingWordSlots %d 16-bit ids are %d", got, RingWordSlots, 2*RingWordSlots)
	}
}

// TestProbeObjectMatches checks the probe encapsulator's object: counter names against its enum,
// its target map against ProbeMaxTargets, and its "config" map against the forwarder's, which the
// loader hands it in place of its own (a struct lb_config changed in one object only would be
// refused at load, on a running balancer; here it fails first).
func TestProbeObjectMatches(t *testing.T) {
	spec, err := bpfobj.LoadProbe()
	if err != nil {
		t.Fatal(err)
	}
	checkNames(t, spec, "probe_counter_index", "PCNT_MAX", bpfobj.ProbeMapProbeCounters, ProbeCounterNames[:])
	if got := spec.Maps[bpfobj.ProbeMapProbeTargets].MaxEntries; got != ProbeMaxTargets {
		t.Errorf("probe_targets holds %d entries in the object, ProbeMaxTargets is %d", got, ProbeMaxTargets)
	}
	if max := ProbeMaxTargets - 1; uint32(max)&ProbeMarkMask != 0 {
		t.Errorf("target index %d does not fit the index bits of the mark (mask %#x)", max, ProbeMarkMask)
	}
	lb, err := bpfobj.LoadLB()
	if err != nil {
		t.Fatal(err)
	}
	p, f := spec.Maps[bpfobj.ProbeMapConfig], lb.Maps[bpfobj.LBMapConfig]
	if p.Type != f.Type || p.KeySize != f.KeySize || p.ValueSize != f.ValueSize || p.MaxEntries != f.MaxEntries || p.Flags != f.Flags {
		t.Errorf("probe config map %+v differs from the forwarder's %+v", p, f)
	}
}
