package l4exp

import (
	"encoding/binary"
	"testing"
)

// TestSYNPacket: the flood's packets carry valid IPv4 and TCP checksums (a receiver that
// checks them, the balancer's kernel after XDP_PASS or the backend's, would drop them
// otherwise, and the flood would cost less than a real one), and the fields are where a
// parser looks for them.
func TestSYNPacket(t *testing.T) {
	var p [40]byte
	src, dst := uint32(0xc6130a0b), uint32(0xc6126401) // 198.19.10.11 -> 198.18.100.1
	for _, sport := range []uint16{1024, 40000, 65535} {
		synPacket(&p, src, dst, sport, 80, 0xdeadbeef)
		if p[0] != 0x45 || binary.BigEndian.Uint16(p[2:]) != 40 || p[9] != 6 {
			t.Fatalf("IPv4 header % x", p[:20])
		}
		if binary.BigEndian.Uint32(p[12:]) != src || binary.BigEndian.Uint32(p[16:]) != dst {
			t.Fatalf("addresses % x", p[12:20])
		}
		if c := checksum(0, p[:20]); c != 0 {
			t.Errorf("IPv4 header checksum does not verify (%#x)", c)
		}
		pseudo := src>>16 + src&0xffff + dst>>16 + dst&0xffff + 6 + 20
		if c := checksum(pseudo, p[20:]); c != 0 {
			t.Errorf("TCP checksum does not verify (%#x)", c)
		}
		if binary.BigEndian.Uint16(p[20:]) != sport || binary.BigEndian.Uint16(p[22:]) != 80 || p[33] != 0x02 || p[32]>>4 != 5 {
			t.Errorf("TCP header % x", p[20:])
		}
	}
	// RFC 1071's example: the sum of 0001 f203 f4f5 f6f7 is ddf2, its checksum 220d.
	if c := checksum(0, []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}); c != 0x220d {
		t.Errorf("checksum of RFC 1071's example = %#x, want 0x220d", c)
	}
}
