package maps

import (
	"net/netip"
	"testing"
)

// TestFlowHashValues pins the flow hash's values: every node of a fleet, and every version that
// runs beside another during an upgrade, must send a new flow to the same ring slot, so a change
// of these values moves where new flows go (docs/xdp.md, "Flow hash across versions"): made on
// purpose or not at all. loader's TestFlowHashMatchesGo checks the program against FlowHash.
func TestFlowHashValues(t *testing.T) {
	v4 := Flow{Src: netip.MustParseAddrPort("198.18.1.10:40000"), Dst: netip.MustParseAddrPort("198.18.100.1:80"), Proto: TCP}
	v6 := Flow{Src: netip.MustParseAddrPort("[fd00:5e:1::10]:40000"), Dst: netip.MustParseAddrPort("[fd00:5e:100::1]:443"), Proto: UDP}
	for _, c := range []struct {
		f     Flow
		flags VIPFlags
		want  uint32
	}{
		{v4, 0, 0xd132fcec},
		{v4, HashSrcOnly, 0x9cc5cf94},
		{v4, NoSrcPort, 0x28339172},
		{v6, 0, 0x65815005},
		{v6, HashSrcOnly, 0xab73a7fe},
		{v6, NoSrcPort, 0xf5c07eea},
	} {
		if got := FlowHash(c.f, c.flags); got != c.want {
			t.Errorf("FlowHash(%s, %#x) = %#08x, want %#08x", c.f, c.flags, got, c.want)
		}
	}
}
