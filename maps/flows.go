package maps

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// Flow is a client-to-VIP 5-tuple.
type Flow struct {
	Src   netip.AddrPort
	Dst   netip.AddrPort
	Proto Proto
}

func (f Flow) String() string { return fmt.Sprintf("%s %s -> %s", f.Proto, f.Src, f.Dst) }

// FlowEntry is a connection-table entry.
type FlowEntry struct {
	Flow
	Backend uint32
	// VIPID is the id of the VIP the flow was balanced for.
	VIPID uint32
	// Closing is set once the client sent FIN or RST.
	Closing bool
	// Idle is the time since the entry was last refreshed (at most once a second for TCP).
	Idle time.Duration
	// SecondChance is the backend id every packet of the flow carries as its second candidate
	// (0 = none): the flow missed the table mid-stream while the previous ring named another
	// backend.
	SecondChance uint32
	// Unconfirmed is set for an entry of the unconfirmed tables: a flow that sent its SYN and no
	// other packet yet (bpf/include/maps.h, ct_promote).
	Unconfirmed bool
}

// FlowKey builds the key of a flow in the IPv6 connection table, conntrack (IPv4 flows are keyed
// in conntrack4 by the 16-byte flow_key4, layout v2); it is also the input of the flow hash.
func FlowKey(f Flow) bpfobj.LBFlowKey {
	s, fam := addrWords(f.Src.Addr())
	d, _ := addrWords(f.Dst.Addr())
	return bpfobj.LBFlowKey{Src: s, Dst: d, Sport: netPort(f.Src.Port()), Dport: netPort(f.Dst.Port()), Proto: uint8(f.Proto), Family: fam}
}

// flowKey4 builds the key of an IPv4 flow in the IPv4 connection table (layout v2).
func flowKey4(f Flow) bpfobj.LBFlowKey4 {
	s, d := f.Src.Addr().Unmap().As4(), f.Dst.Addr().Unmap().As4()
	return bpfobj.LBFlowKey4{Src: nativeWord(s[:]), Dst: nativeWord(d[:]), Sport: netPort(f.Src.Port()), Dport: netPort(f.Dst.Port()), Proto: uint8(f.Proto)}
}

func key4Flow(k bpfobj.LBFlowKey4) Flow {
	return Flow{
		Src:   netip.AddrPortFrom(wordsAddr([4]uint32{k.Src}, 4), netPort(k.Sport)),
		Dst:   netip.AddrPortFrom(wordsAddr([4]uint32{k.Dst}, 4), netPort(k.Dport)),
		Proto: Proto(k.Proto),
	}
}

// table is the connection table of a flow's family and its key there: IPv4 flows live in
// conntrack4 (16-byte keys), IPv6 flows in conntrack.
func (s *Set) table(f Flow) (*ebpf.Map, any) {
	if f.Src.Addr().Unmap().Is4() {
		return s.m.Conntrack4, flowKey4(f)
	}
	return s.m.Conntrack, FlowKey(f)
}

// unconfirmedTable is table for the unconfirmed tables (conntrack_syn4, conntrack_syn).
func (s *Set) unconfirmedTable(f Flow) (*ebpf.Map, any) {
	if f.Src.Addr().Unmap().Is4() {
		return s.m.ConntrackSyn4, flowKey4(f)
	}
	return s.m.ConntrackSyn, FlowKey(f)
}

func keyFlow(k bpfobj.LBFlowKey) Flow {
	return Flow{
		Src:   netip.AddrPortFrom(wordsAddr(k.Src, k.Family), netPort(k.Sport)),
		Dst:   netip.AddrPortFrom(wordsAddr(k.Dst, k.Family), netPort(k.Dport)),
		Proto: Proto(k.Proto),
	}
}

func entry(f Flow, v bpfobj.LBFlowState, now time.Duration) FlowEntry {
	idle := now - time.Duration(v.LastSeen)
	if idle < 0 {
		idle = 0
	}
	return FlowEntry{Flow: f, Backend: v.Backend, VIPID: uint32(v.VipId), Closing: v.Flags&uint32(bpfobj.LBFlowFlagsFLOW_CLOSING) != 0, Idle: idle,
		SecondChance: v.Backend2}
}

// LookupFlow reads a flow's connection-table entry, else its unconfirmed entry.
func (s *Set) LookupFlow(f Flow) (FlowEntry, bool, error) {
	var v bpfobj.LBFlowState
	for _, unconfirmed := range []bool{false, true} {
		m, k := s.table(f)
		if unconfirmed {
			m, k = s.unconfirmedTable(f)
		}
		err := m.Lookup(k, &v)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		}
		if err != nil {
			return FlowEntry{}, false, fmt.Errorf("look up flow %s: %w", f, err)
		}
		e := entry(f, v, monotonicNow())
		e.Unconfirmed = unconfirmed
		return e, true, nil
	}
	return FlowEntry{}, false, nil
}

// Flows lists the connection tables (IPv4, then IPv6), then the unconfirmed tables. An LRU table
// can change while it is read; entries may be missed or seen twice, which is fine for the counts
// it serves.
func (s *Set) Flows() ([]FlowEntry, error) {
	var out []FlowEntry
	now := monotonicNow()
	for _, t := range []struct {
		m           *ebpf.Map
		v4          bool
		unconfirmed bool
	}{{s.m.Conntrack4, true, false}, {s.m.Conntrack, false, false}, {s.m.ConntrackSyn4, true, true}, {s.m.ConntrackSyn, false, true}} {
		var err error
		if out, err = listFlows(out, t.m, t.v4, t.unconfirmed, now); err != nil {
			return out, err
		}
	}
	return out, nil
}

// listFlows appends the entries of one table to out.
func listFlows(out []FlowEntry, m *ebpf.Map, v4, unconfirmed bool, now time.Duration) ([]FlowEntry, error) {
	var (
		k4 bpfobj.LBFlowKey4
		k  bpfobj.LBFlowKey
		v  bpfobj.LBFlowState
	)
	it := m.Iterate()
	for {
		var f Flow
		if v4 {
			if !it.Next(&k4, &v) {
				break
			}
			f = key4Flow(k4)
		} else {
			if !it.Next(&k, &v) {
				break
			}
			f = keyFlow(k)
		}
		e := entry(f, v, now)
		e.Unconfirmed = unconfirmed
		out = append(out, e)
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("list flows of %s: %w", m, err)
	}
	return out, nil
}

// ActiveFlows counts, per backend, the flows that are not closing and were seen within idle
// (UDP flows past udpTimeout are not counted either).
func (s *Set) ActiveFlows(idle, udpTimeout time.Duration) (map[uint32]int, error) {
	flows, err := s.Flows()
	out := map[uint32]int{}
	for _, f := range flows {
		if f.Closing || f.Idle > idle || (f.Proto == UDP && udpTimeout > 0 && f.Idle > udpTimeout) {
			continue
		}
		out[f.Backend]++
	}
	return out, err
}

// DeleteFlowsTo removes every connection-table entry that points at a backend (as its backend or
// its second-chance candidate), for any VIP.
func (s *Set) DeleteFlowsTo(backendID uint32) (int, error) {
	return s.deleteFlows(func(f FlowEntry) bool { return f.Backend == backendID || f.SecondChance == backendID })
}

// DeleteFlows removes the connection-table entries of one VIP that point at a backend (as its
// backend or its second-chance candidate): used when a drain times out, so that the remaining
// flows re-hash instead of reaching the backend, while the same backend keeps its flows of other
// VIPs.
func (s *Set) DeleteFlows(vipID, backendID uint32) (int, error) {
	return s.deleteFlows(func(f FlowEntry) bool {
		return (f.Backend == backendID || f.SecondChance == backendID) && f.VIPID == vipID
	})
}

func (s *Set) deleteFlows(match func(FlowEntry) bool) (int, error) {
	flows, err := s.Flows()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range flows {
		if !match(f) {
			continue
		}
		m, k := s.table(f.Flow)
		if f.Unconfirmed {
			m, k = s.unconfirmedTable(f.Flow)
		}
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, fmt.Errorf("delete flow %s: %w", f.Flow, err)
		}
		n++
	}
	return n, nil
}

// DeleteAllFlows empties the connection table (tests: a balancer that forgets its flows, as a
// node that takes over another's flows has never seen them).
func (s *Set) DeleteAllFlows() (int, error) {
	return s.deleteFlows(func(FlowEntry) bool { return true })
}

// PutFlow writes a connection-table entry for a VIP id (tests and state migration).
func (s *Set) PutFlow(f Flow, backendID, vipID uint32) error {
	var g uint32
	if err := s.m.VipGens.Lookup(vipID, &g); err != nil {
		return fmt.Errorf("put flow %s: vip id %d: %w", f, vipID, err)
	}
	v := bpfobj.LBFlowState{Backend: backendID, VipId: uint16(vipID), VipGen: uint16(g), LastSeen: uint64(monotonicNow())}
	m, k := s.table(f)
	if err := m.Put(k, v); err != nil {
		return fmt.Errorf("put flow %s: %w", f, err)
	}
	return nil
}
