package maps

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/switchyard/switchyard/internal/layout"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// enumValue reads one constant of a C enum from the BTF of the compiled forwarder (not from the Go
// bpf2go generated), so Go that drifted from the object is seen.
func enumValue(t *testing.T, spec *ebpf.CollectionSpec, enum, name string) uint64 {
	t.Helper()
	var e *btf.Enum
	if err := spec.Types.TypeByName(enum, &e); err != nil {
		t.Fatalf("enum %s in the object's BTF: %v (is it listed in struct go_types of bpf/lb.c?)", enum, err)
	}
	for _, v := range e.Values {
		if v.Name == name {
			return v.Value
		}
	}
	t.Fatalf("enum %s has no %s", enum, name)
	return 0
}

// checkNames checks that names has one non-empty, distinct name for each of n indexes.
func checkNames(t *testing.T, enum string, n uint64, names []string) {
	t.Helper()
	if uint64(len(names)) != n {
		t.Errorf("%d names for the %d values of enum %s: run `make generate`", len(names), n, enum)
	}
	seen := map[string]int{}
	for i, name := range names {
		if name == "" {
			t.Errorf("enum %s index %d has no Go name: name it in maps/counters.go", enum, i)
		} else if j, dup := seen[name]; dup {
			t.Errorf("enum %s indexes %d and %d are both named %q", enum, j, i, name)
		}
		seen[name] = i
	}
}

// TestCounterNamesCoverEnums checks the forwarder's counter names against enum counter_index
// and enum sc_counter_index of the compiled object, and the structs and maps that hold them.
func TestCounterNamesCoverEnums(t *testing.T) {
	spec, err := bpfobj.LoadLB()
	if err != nil {
		t.Fatal(err)
	}
	n := enumValue(t, spec, "counter_index", "CNT_MAX")
	checkNames(t, "counter_index", n, CounterNames[:])
	var pc *btf.Struct
	if err := spec.Types.TypeByName("lb_percpu", &pc); err != nil {
		t.Fatal(err)
	}
	if a, ok := btf.UnderlyingType(pc.Members[0].Type).(*btf.Array); !ok || pc.Members[0].Name != "cnt" || uint64(a.Nelems) != n {
		t.Errorf("struct lb_percpu's first member is not cnt[CNT_MAX = %d]: %v", n, pc.Members[0])
	}
	n = enumValue(t, spec, "sc_counter_index", "SC_CNT_MAX")
	checkNames(t, "sc_counter_index", n, SecondChanceCounterNames[:])
	if got := spec.Maps[bpfobj.LBMapScCounters].MaxEntries; uint64(got) != n {
		t.Errorf("map sc_counters holds %d entries, SC_CNT_MAX is %d", got, n)
	}
	n = enumValue(t, spec, "quic_counter_index", "QUIC_CNT_MAX")
	checkNames(t, "quic_counter_index", n, QUICCounterNames[:])
	if got := spec.Maps[bpfobj.LBMapQuicCounters].MaxEntries; uint64(got) != n {
		t.Errorf("map quic_counters holds %d entries, QUIC_CNT_MAX is %d", got, n)
	}
	n = enumValue(t, spec, "guard_counter_index", "GUARD_CNT_MAX")
	checkNames(t, "guard_counter_index", n, GuardCounterNames[:])
	if got := spec.Maps[bpfobj.LBMapGuardCounters].MaxEntries; uint64(got) != n {
		t.Errorf("map guard_counters holds %d entries, GUARD_CNT_MAX is %d", got, n)
	}
}

// TestConstsMatchObject checks the flags and sizes the map code uses against the compiled
// forwarder: the enums' values, and the VIP filter's size.
func TestConstsMatchObject(t *testing.T) {
	spec, err := bpfobj.LoadLB()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		enum, name string
		goValue    uint64
	}{
		{"vip_flags", "VIP_HASH_SRC_ONLY", uint64(HashSrcOnly)},
		{"vip_flags", "VIP_NO_SRC_PORT", uint64(NoSrcPort)},
		{"cfg_flags", "CFG_ICMP_TOOBIG", uint64(cfgICMPTooBig)},
		{"cfg_flags", "CFG_SECOND_CHANCE", uint64(cfgSecondChance)},
		{"flow_flags", "FLOW_CLOSING", uint64(bpfobj.LBFlowFlagsFLOW_CLOSING)},
		{"flow_hash", "FLOW_HASH_SEED", uint64(flowHashSeed)},
		{"vip_filter_size", "VIP_FILTER_SLOTS", uint64(vipFilterSlots)},
		{"family", "FAMILY_V4", uint64(familyV4)},
		{"family", "FAMILY_V6", uint64(familyV6)},
		// The limits control/config checks against without the loader (internal/layout).
		{"quic_vip_bits", "QUIC_LB_SID_MAX", uint64(layout.QUICLBMaxServerIDLen)},
		{"quic_vip_bits", "VIP_QUIC_CR_MASK", uint64(layout.QUICLBMaxConfigID + 1)},
		{"guard_sizes", "GUARD_RULES_MAX", uint64(layout.GuardRulesMax)},
		{"guard_sizes", "GUARD_SCOPE_GLOBAL", uint64(layout.GuardScopeGlobal)},
	} {
		t.Run(c.enum, func(t *testing.T) {
			if c.goValue != enumValue(t, spec, c.enum, c.name) {
				t.Errorf("%s is %#x in Go, %#x in the object: run `make generate`", c.name, c.goValue, enumValue(t, spec, c.enum, c.name))
			}
		})
	}
	if got := spec.Maps[bpfobj.LBMapVipFilter].MaxEntries; got != vipFilterSlots {
		t.Errorf("map vip_filter holds %d slots, vipFilterSlots is %d", got, vipFilterSlots)
	}
}
