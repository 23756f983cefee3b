package maps

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// CounterNames names the forwarder's global counters, indexed by enum counter_index of
// bpf/include/consts.h (generated into package bpfobj by bpf2go): the array is CNT_MAX long, so a counter
// added in C and left unnamed here is an empty name, which TestCounterNamesCoverEnums reports.
// TX, PASS and DROP count verdicts; the others count events (a frame answered with ICMP too-big
// counts drop_mtu and icmp_toobig_sent, and its verdict is TX).
var CounterNames = [bpfobj.LBCounterIndexCNT_MAX]string{
	bpfobj.LBCounterIndexCNT_TX:                "tx",
	bpfobj.LBCounterIndexCNT_PASS:              "pass",
	bpfobj.LBCounterIndexCNT_DROP:              "drop",
	bpfobj.LBCounterIndexCNT_CT_HIT:            "conntrack_hit",
	bpfobj.LBCounterIndexCNT_CT_MISS_SYN:       "conntrack_miss_syn",
	bpfobj.LBCounterIndexCNT_CT_MISS_NONSYN:    "conntrack_miss_nonsyn",
	bpfobj.LBCounterIndexCNT_ICMP_FWD:          "icmp_forwarded",
	bpfobj.LBCounterIndexCNT_ICMP_ECHO:         "icmp_echo_replied",
	bpfobj.LBCounterIndexCNT_ICMP_TOOBIG_TX:    "icmp_toobig_sent",
	bpfobj.LBCounterIndexCNT_DROP_IP_OPTS:      "drop_ip_options",
	bpfobj.LBCounterIndexCNT_DROP_FRAG:         "drop_fragment",
	bpfobj.LBCounterIndexCNT_DROP_MTU:          "drop_mtu",
	bpfobj.LBCounterIndexCNT_DROP_NO_BACKEND:   "drop_no_backend",
	bpfobj.LBCounterIndexCNT_DROP_MALFORMED:    "drop_malformed",
	bpfobj.LBCounterIndexCNT_DROP_UNSUPPORTED:  "drop_unsupported",
	bpfobj.LBCounterIndexCNT_DROP_ENCAP:        "drop_encap",
	bpfobj.LBCounterIndexCNT_CT_INSERT_SKIPPED: "conntrack_insert_skipped",
}

// SecondChanceCounterNames names the forwarder's second-chance counters (the map sc_counters),
// indexed by enum sc_counter_index. Counters returns them with the others.
var SecondChanceCounterNames = [bpfobj.LBScCounterIndexSC_CNT_MAX]string{
	bpfobj.LBScCounterIndexSC_CNT_SENT:    "second_chance_sent",
	bpfobj.LBScCounterIndexSC_CNT_FLOWS:   "second_chance_flows",
	bpfobj.LBScCounterIndexSC_CNT_TOO_BIG: "second_chance_too_big",
}

// Counter is a packet and byte count, summed over CPUs.
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// sumPerCPU reads one per-CPU slot and sums it over every possible CPU.
func sumPerCPU(m *ebpf.Map, idx uint32) (Counter, error) {
	var per []bpfobj.LBCounter
	if err := m.Lookup(idx, &per); err != nil {
		return Counter{}, err
	}
	var c Counter
	for _, p := range per {
		c.Packets += p.Packets
		c.Bytes += p.Bytes
	}
	return c, nil
}

// Counters reads the global counters and the second-chance counters by name.
func (s *Set) Counters() (map[string]Counter, error) {
	out := make(map[string]Counter, len(CounterNames)+len(SecondChanceCounterNames))
	// The global counters are one per-CPU struct (layout v2): one read for all of them.
	var per []bpfobj.LBLbPercpu
	if err := s.m.Counters.Lookup(uint32(0), &per); err != nil {
		return nil, fmt.Errorf("read counters: %w", err)
	}
	for i, name := range CounterNames {
		var c Counter
		for _, p := range per {
			c.Packets += p.Cnt[i].Packets
			c.Bytes += p.Cnt[i].Bytes
		}
		out[name] = c
	}
	for i, name := range SecondChanceCounterNames {
		c, err := sumPerCPU(s.m.ScCounters, uint32(i))
		if err != nil {
			return nil, fmt.Errorf("read counter %s: %w", name, err)
		}
		out[name] = c
	}
	if err := s.quicCounters(out); err != nil {
		return nil, err
	}
	return out, nil
}

// VIPStats reads a VIP's packets and bytes.
func (s *Set) VIPStats(id uint32) (Counter, error) {
	c, err := sumPerCPU(s.m.VipStats, id)
	if err != nil {
		return c, fmt.Errorf("read vip %d stats: %w", id, err)
	}
	return c, nil
}

// VIPDrops reads the packets (and bytes) toward a VIP that were dropped, for any reason (the
// reasons are the global drop_* counters): a VIP without a usable backend, over the MTU,
// malformed (lengths that do not fit), or that could not be encapsulated.
func (s *Set) VIPDrops(id uint32) (Counter, error) {
	c, err := sumPerCPU(s.m.VipDrops, id)
	if err != nil {
		return c, fmt.Errorf("read vip %d drops: %w", id, err)
	}
	return c, nil
}

// BackendStats reads a backend's packets and bytes.
func (s *Set) BackendStats(id uint32) (Counter, error) {
	c, err := sumPerCPU(s.m.BackendStats, id)
	if err != nil {
		return c, fmt.Errorf("read backend %d stats: %w", id, err)
	}
	return c, nil
}

// ResetVIPStats zeroes a VIP's stats and drops slots on every CPU (when its id is given to a new
// VIP).
func (s *Set) ResetVIPStats(id uint32) error {
	if err := zeroPerCPU(s.m.VipStats, id); err != nil {
		return err
	}
	return zeroPerCPU(s.m.VipDrops, id)
}

// ResetBackendStats zeroes a backend's stats slot on every CPU.
func (s *Set) ResetBackendStats(id uint32) error { return zeroPerCPU(s.m.BackendStats, id) }

// ResetCounters zeroes every global counter.
func (s *Set) ResetCounters() error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("count cpus: %w", err)
	}
	if err := s.m.Counters.Put(uint32(0), make([]bpfobj.LBLbPercpu, n)); err != nil {
		return fmt.Errorf("reset counters: %w", err)
	}
	for i := range SecondChanceCounterNames {
		if err := zeroPerCPU(s.m.ScCounters, uint32(i)); err != nil {
			return err
		}
	}
	return s.resetQUICCounters()
}

func zeroPerCPU(m *ebpf.Map, idx uint32) error {
	n, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("count cpus: %w", err)
	}
	if err := m.Put(idx, make([]bpfobj.LBCounter, n)); err != nil {
		return fmt.Errorf("reset stats slot %d: %w", idx, err)
	}
	return nil
}

// AllVIPStats reads every VIP stats slot at once (batch lookups: a few syscalls, not one per
// VIP), indexed by VIP id.
func (s *Set) AllVIPStats() ([]Counter, error) { return sumAllPerCPU(s.m.VipStats, "vip stats") }

// AllBackendStats reads every backend stats slot at once, indexed by backend id.
func (s *Set) AllBackendStats() ([]Counter, error) {
	return sumAllPerCPU(s.m.BackendStats, "backend stats")
}

// sumAllPerCPU reads a per-CPU array of counters whole, summed over CPUs, with batch lookups.
func sumAllPerCPU(m *ebpf.Map, what string) ([]Counter, error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	n := int(m.MaxEntries())
	const chunk = 4096
	keys := make([]uint32, chunk)
	vals := make([]bpfobj.LBCounter, chunk*ncpu)
	out := make([]Counter, n)
	var cursor ebpf.MapBatchCursor
	for got := 0; got < n; {
		c, err := m.BatchLookup(&cursor, keys, vals, nil)
		for i := 0; i < c; i++ {
			if k := int(keys[i]); k < n {
				for _, p := range vals[i*ncpu : (i+1)*ncpu] {
					out[k].Packets += p.Packets
					out[k].Bytes += p.Bytes
				}
			}
		}
		got += c
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", what, err)
		}
		if c == 0 {
			break
		}
	}
	return out, nil
}
