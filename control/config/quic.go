package config

import (
	"net/netip"

	"github.com/switchyard/switchyard/internal/layout"
)

// QUIC schemes: how a backend writes its server ID into the connection IDs it issues.
const (
	// QUICSchemeLB is the plaintext algorithm of the QUIC-LB draft: config rotation bits in the
	// top three bits of the first byte, then server_id_len bytes of server ID (the default).
	QUICSchemeLB = "quic-lb"
	// QUICSchemeKatran is Katran's scheme: two version bits, then a 16-, 24- or 32-bit ID.
	QUICSchemeKatran = "katran"
	// DefaultQUICServerIDLen is the QUIC-LB server ID length when server_id_len is left out.
	DefaultQUICServerIDLen = 2
)

// QUIC routes a UDP VIP's QUIC packets by the server ID their destination connection ID carries
// (docs/xdp.md, "QUIC by connection ID"): a migrated client keeps its backend, and a change of
// the backend set moves no established connection. Each backend's server ID is its server_id,
// or else its backend id (see `backend list`).
type QUIC struct {
	// Enabled turns routing by connection ID on.
	Enabled bool `yaml:"enabled,omitempty"`
	// Scheme is quic-lb (default) or katran.
	Scheme string `yaml:"scheme,omitempty"`
	// ServerIDLen is the QUIC-LB server ID length in bytes, 1..4 (default 2).
	ServerIDLen int `yaml:"server_id_len,omitempty"`
	// ConfigID is the QUIC-LB config rotation value, 0..6 (default 0), in the top three bits of
	// a connection ID's first byte; connection IDs with other bits take the hash path.
	ConfigID int `yaml:"config_id,omitempty"`
}

// IDLen is the QUIC-LB server ID length in bytes, ServerIDLen or its default (0 for the other
// schemes and without QUIC).
func (q QUIC) IDLen() int {
	switch {
	case !q.Enabled || q.Scheme == QUICSchemeKatran:
		return 0
	case q.ServerIDLen == 0:
		return DefaultQUICServerIDLen
	}
	return q.ServerIDLen
}

// MaxServerID is the largest server ID the settings carry (0 without QUIC); q must be valid.
func (q QUIC) MaxServerID() uint64 {
	switch {
	case !q.Enabled:
		return 0
	case q.Scheme == QUICSchemeKatran:
		return layout.QUICKatranMaxServerID
	}
	return 1<<(8*q.IDLen()) - 1
}

// validateQUIC checks a VIP's quic block and its backends' server_id.
func (v *VIP) validateQUIC(l locator, i int) error {
	at := func(p ...any) []any { return append([]any{"vips", i}, p...) }
	q := v.QUIC
	if !q.Enabled {
		if q != (QUIC{}) {
			return l.errf(at("quic", "enabled"), "quic settings given but not enabled: add `enabled: true` or remove the quic block")
		}
		for j, b := range v.Backends {
			if b.ServerID != 0 {
				return l.errf(at("backends", j, "server_id"), "server_id needs QUIC routing on the VIP: add `quic: {enabled: true}` or remove it")
			}
		}
		return nil
	}
	if v.Proto() != ProtocolUDP {
		return l.errf(at("quic", "enabled"), "QUIC runs over UDP: set `protocol: udp` on the VIP")
	}
	switch q.Scheme {
	case "", QUICSchemeLB:
		if n := q.IDLen(); n < 1 || n > layout.QUICLBMaxServerIDLen {
			return l.errf(at("quic", "server_id_len"), "%d out of range: use 1..%d bytes", q.ServerIDLen, layout.QUICLBMaxServerIDLen)
		}
		if q.ConfigID < 0 || q.ConfigID > layout.QUICLBMaxConfigID {
			return l.errf(at("quic", "config_id"), "%d out of range: use 0..%d (7 marks unroutable connection IDs)", q.ConfigID, layout.QUICLBMaxConfigID)
		}
	case QUICSchemeKatran:
		if q.ServerIDLen != 0 || q.ConfigID != 0 {
			return l.errf(at("quic", "server_id_len"), "katran connection IDs say their own ID length in their version bits: remove server_id_len and config_id")
		}
	default:
		return l.errf(at("quic", "scheme"), "unknown scheme %q: use quic-lb or katran", q.Scheme)
	}
	max := q.MaxServerID()
	set := 0
	for j, b := range v.Backends {
		if uint64(b.ServerID) > max {
			return l.errf(at("backends", j, "server_id"), "%d does not fit the VIP's %d-byte server IDs (at most %d): use a smaller id or raise quic.server_id_len", b.ServerID, q.IDLen(), max)
		}
		if b.ServerID != 0 {
			set++
		}
	}
	if set != 0 && set != len(v.Backends) {
		for j, b := range v.Backends {
			if b.ServerID == 0 {
				return l.errf(at("backends", j, "server_id"), "missing: give every backend of the VIP a server_id, or none (each then uses its backend id), so that a configured ID never equals an allocated one")
			}
		}
	}
	return nil
}

// validateServerIDs checks across the QUIC VIPs that a backend address has one server_id (or
// none) in all of them, and that no two addresses share one.
func (c *Config) validateServerIDs(l locator) error {
	type where struct{ vip, be int }
	byAddr := map[string]where{}
	bySID := map[uint32]where{}
	for i := range c.VIPs {
		if !c.VIPs[i].QUIC.Enabled {
			continue
		}
		for j, b := range c.VIPs[i].Backends {
			a := parseAddrOrZero(b.Address)
			if w, ok := byAddr[a]; ok && c.VIPs[w.vip].Backends[w.be].ServerID != b.ServerID {
				return l.errf([]any{"vips", i, "backends", j, "server_id"}, "%s has server_id %d in vips[%d]: a backend has one server ID in every VIP", b.Address, c.VIPs[w.vip].Backends[w.be].ServerID, w.vip)
			}
			byAddr[a] = where{i, j}
			if b.ServerID == 0 {
				continue
			}
			if w, ok := bySID[b.ServerID]; ok && parseAddrOrZero(c.VIPs[w.vip].Backends[w.be].Address) != a {
				return l.errf([]any{"vips", i, "backends", j, "server_id"}, "server_id %d is also %s's (vips[%d]): give each backend its own", b.ServerID, c.VIPs[w.vip].Backends[w.be].Address, w.vip)
			}
			bySID[b.ServerID] = where{i, j}
		}
	}
	return nil
}

// parseAddrOrZero is the canonical spelling of an address (the input when it does not parse).
func parseAddrOrZero(s string) string {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return s
	}
	return a.Unmap().String()
}
