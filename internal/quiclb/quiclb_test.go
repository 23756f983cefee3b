package quiclb

import (
	"strings"
	"testing"
)

// TestGeneratorLayout: every ID carries the config rotation bits in the top three bits of byte
// 0 and the server ID big-endian after it, at the length the generator announces.
func TestGeneratorLayout(t *testing.T) {
	for _, c := range []Config{{ServerID: 0x0102}, {ServerID: 0x0a0b0c0d, ServerIDLen: 4, ConfigID: 6}, {ServerID: 7, ServerIDLen: 1, ConfigID: 1}} {
		g := c.Generator()
		for i := 0; i < 50; i++ {
			id, err := g.GenerateConnectionID()
			if err != nil {
				t.Fatal(err)
			}
			b := id.Bytes()
			if len(b) != g.ConnectionIDLen() || len(b) != 1+c.IDLen()+NonceLen {
				t.Fatalf("%+v: id %x of length %d, announced %d", c, b, len(b), g.ConnectionIDLen())
			}
			var sid uint32
			for _, x := range b[1 : 1+c.IDLen()] {
				sid = sid<<8 | uint32(x)
			}
			if int(b[0]>>5) != c.ConfigID || sid != c.ServerID {
				t.Fatalf("%+v: id %x carries config %d server %d", c, b, b[0]>>5, sid)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for c, want := range map[Config]string{
		{ServerID: 0}:                   "server_id 0 out of range: use 1..65535",
		{ServerID: 256, ServerIDLen: 1}: "server_id 256 out of range: use 1..255",
		{ServerID: 1, ServerIDLen: 5}:   "server_id_len 5 out of range",
		{ServerID: 1, ConfigID: 7}:      "config_id 7 out of range: use 0..6",
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", c, err, want)
		}
	}
	if err := (Config{ServerID: 65535}).Validate(); err != nil {
		t.Errorf("server 65535 of 2 bytes: %v", err)
	}
}
