package reconcile

import (
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/maps"
)

// The configuration speaks in YAML's terms (addresses, protocol and hash names, QUIC settings);
// the conversion to the map layout's keys and flags is here, on the side that writes the maps,
// so control/config does not depend on the layout.

// KeyOf is v's key in the forwarder's maps; v must be valid (config.Validate).
func KeyOf(v *config.VIP) maps.VIPKey {
	p := maps.TCP
	if v.Proto() == config.ProtocolUDP {
		p = maps.UDP
	}
	return maps.VIPKey{Addr: v.Addr(), Port: v.Port, Proto: p}
}

// FlagsOf are v's VIP flags: its hash option and QUIC routing; v must be valid.
func FlagsOf(v *config.VIP) maps.VIPFlags {
	var f maps.VIPFlags
	switch v.Hash {
	case config.HashSourceOnly:
		f = maps.HashSrcOnly
	case config.HashNoSourcePort:
		f = maps.NoSrcPort
	}
	switch q := v.QUIC; {
	case !q.Enabled:
	case q.Scheme == config.QUICSchemeKatran:
		f |= maps.QUICKatran
	default:
		lb, _ := maps.QUICLBFlags(q.IDLen(), q.ConfigID) // valid: config checked both ranges
		f |= lb
	}
	return f
}
