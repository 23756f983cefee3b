package maps

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/internal/layout"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// QUIC routing by connection ID (bpf/include/quic.h, docs/xdp.md "QUIC by connection ID"): the
// VIP flags carry the scheme and, for QUIC-LB, the server ID length and config rotation bits; the
// quic_servers map gives each server ID its backend id.
const (
	// QUICKatran routes by a server ID in Katran's connection-ID scheme (version bits, then a
	// 16-, 24- or 32-bit ID).
	QUICKatran = VIPFlags(bpfobj.LBQuicVipBitsVIP_QUIC_KATRAN)
	// QUICLB routes by a QUIC-LB plaintext server ID (config rotation bits, then the ID).
	QUICLB = VIPFlags(bpfobj.LBQuicVipBitsVIP_QUIC_LB)
	// QUICLBMaxServerIDLen is the longest QUIC-LB server ID the forwarder reads, in bytes.
	QUICLBMaxServerIDLen = int(bpfobj.LBQuicVipBitsQUIC_LB_SID_MAX)
	// QUICKatranMaxServerID is the largest server ID of Katran's scheme (version 3: 32 bits;
	// 0 means none). Version 1 holds IDs below 1<<16, version 2 below 1<<24.
	QUICKatranMaxServerID = layout.QUICKatranMaxServerID

	quicSIDLenShift = bpfobj.LBQuicVipBitsVIP_QUIC_SID_LEN_SHIFT
	quicSIDLenMask  = bpfobj.LBQuicVipBitsVIP_QUIC_SID_LEN_MASK
	quicCRShift     = bpfobj.LBQuicVipBitsVIP_QUIC_CR_SHIFT
	quicCRMask      = bpfobj.LBQuicVipBitsVIP_QUIC_CR_MASK
)

// QUICLBFlags are the VIP flags of a QUIC-LB VIP: server IDs of sidLen bytes (1..4) under config
// rotation bits configID (0..6).
func QUICLBFlags(sidLen, configID int) (VIPFlags, error) {
	if sidLen < 1 || sidLen > QUICLBMaxServerIDLen {
		return 0, fmt.Errorf("quic-lb server_id_len %d: use 1 to %d bytes", sidLen, QUICLBMaxServerIDLen)
	}
	if configID < 0 || configID > layout.QUICLBMaxConfigID {
		return 0, fmt.Errorf("quic-lb config_id %d: use 0 to %d (7 marks unroutable connection IDs)", configID, layout.QUICLBMaxConfigID)
	}
	return QUICLB | VIPFlags(sidLen)<<quicSIDLenShift | VIPFlags(configID)<<quicCRShift, nil
}

// QUIC reports whether the flags route by connection ID.
func (f VIPFlags) QUIC() bool { return f&(QUICKatran|QUICLB) != 0 }

// QUICServerIDLen is the QUIC-LB server ID length of the flags in bytes (0 for other schemes).
func (f VIPFlags) QUICServerIDLen() int {
	if f&QUICLB == 0 {
		return 0
	}
	return int(f>>quicSIDLenShift) & int(quicSIDLenMask)
}

// QUICConfigID is the QUIC-LB config rotation value of the flags.
func (f VIPFlags) QUICConfigID() int { return int(f>>quicCRShift) & int(quicCRMask) }

// QUICMaxServerID is the largest server ID a VIP with these flags can carry (0 when not QUIC).
func (f VIPFlags) QUICMaxServerID() uint64 {
	switch {
	case f&QUICKatran != 0:
		return QUICKatranMaxServerID
	case f&QUICLB != 0:
		return 1<<(8*f.QUICServerIDLen()) - 1
	}
	return 0
}

// QUICCounterNames names the QUIC routing counters (the map quic_counters), indexed by enum
// quic_counter_index. Counters returns them with the others.
var QUICCounterNames = [bpfobj.LBQuicCounterIndexQUIC_CNT_MAX]string{
	bpfobj.LBQuicCounterIndexQUIC_CNT_ROUTED:  "quic_cid_routed",
	bpfobj.LBQuicCounterIndexQUIC_CNT_INITIAL: "quic_initial_fallback",
	bpfobj.LBQuicCounterIndexQUIC_CNT_UNKNOWN: "quic_cid_unknown_fallback",
	bpfobj.LBQuicCounterIndexQUIC_CNT_NO_ID:   "quic_no_server_id_fallback",
}

// QUICServers reads the server ID -> backend id map.
func (s *Set) QUICServers() (map[uint32]uint32, error) {
	out := map[uint32]uint32{}
	if s.m.QuicServers == nil {
		return out, nil
	}
	var k, v uint32
	it := s.m.QuicServers.Iterate()
	for it.Next(&k, &v) {
		out[k] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("list quic server ids: %w", err)
	}
	return out, nil
}

// SetQUICServers makes the server ID map equal to want (server ID -> backend id).
func (s *Set) SetQUICServers(want map[uint32]uint32) error {
	have, err := s.QUICServers()
	if err != nil {
		return err
	}
	return s.WriteQUICServers(have, want)
}

// WriteQUICServers changes the server ID map from have, what it holds, to want, writing only the
// differences: IDs no longer wanted go first, so that the map never holds more than
// max_backends entries while it changes.
func (s *Set) WriteQUICServers(have, want map[uint32]uint32) error {
	if s.m.QuicServers == nil {
		return errors.New("set quic server ids: the forwarder has no quic_servers map: load it with this binary")
	}
	if n := s.m.QuicServers.MaxEntries(); uint32(len(want)) > n {
		return fmt.Errorf("set quic server ids: %d server IDs, the map holds %d (max_backends): raise max_backends", len(want), n)
	}
	for sid := range have {
		if _, ok := want[sid]; !ok {
			if err := s.m.QuicServers.Delete(sid); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("delete quic server id %d: %w", sid, err)
			}
		}
	}
	for sid, id := range want {
		if old, ok := have[sid]; ok && old == id {
			continue
		}
		if err := s.m.QuicServers.Put(sid, id); err != nil {
			return fmt.Errorf("put quic server id %d (backend %d): %w", sid, id, err)
		}
	}
	return nil
}

func (s *Set) quicCounters(out map[string]Counter) error {
	if s.m.QuicCounters == nil {
		return nil
	}
	for i, name := range QUICCounterNames {
		c, err := sumPerCPU(s.m.QuicCounters, uint32(i))
		if err != nil {
			return fmt.Errorf("read counter %s: %w", name, err)
		}
		out[name] = c
	}
	return nil
}

func (s *Set) resetQUICCounters() error {
	if s.m.QuicCounters == nil {
		return nil
	}
	for i := range QUICCounterNames {
		if err := zeroPerCPU(s.m.QuicCounters, uint32(i)); err != nil {
			return err
		}
	}
	return nil
}
