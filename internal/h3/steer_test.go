package h3

import (
	"testing"

	"github.com/switchyard/switchyard/internal/quiclb"
	"github.com/switchyard/switchyard/loader/quicsteer"
)

// TestSteeredConnectionIDsKeepQUICLB: steered across upgrades, a listener with quic_lb still
// issues IDs whose first bytes are its QUIC-LB config rotation and server ID (what the XDP
// balancer reads), followed by the generation the SK_REUSEPORT program reads; without quic_lb
// the first byte has QUIC-LB's unroutable bits.
func TestSteeredConnectionIDsKeepQUICLB(t *testing.T) {
	lb := quiclb.Config{ServerID: 515, ServerIDLen: 2, ConfigID: 2}
	for name, g := range map[string]cidGen{"quic_lb": {inner: lb.Generator(), gen: 7}, "plain": {gen: 7}} {
		if g.ConnectionIDLen() != quicsteer.CIDLen {
			t.Fatalf("%s: ConnectionIDLen %d, want %d", name, g.ConnectionIDLen(), quicsteer.CIDLen)
		}
		id, err := g.GenerateConnectionID()
		if err != nil {
			t.Fatal(err)
		}
		b := id.Bytes()
		if len(b) != quicsteer.CIDLen || b[quicsteer.PrefixLen] != 7 {
			t.Errorf("%s: %x: want %d bytes with generation 7 at byte %d", name, b, quicsteer.CIDLen, quicsteer.PrefixLen)
		}
		switch name {
		case "quic_lb":
			if b[0]>>5 != 2 || b[1] != 515>>8 || b[2] != 515&0xff {
				t.Errorf("quic_lb: %x does not start with config 2 and server 515 (0x0203)", b)
			}
		case "plain":
			if b[0]>>5 != 0b111 {
				t.Errorf("plain: %x does not start with QUIC-LB's unroutable bits", b)
			}
		}
	}
}
