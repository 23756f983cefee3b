package reconcile

import (
	"testing"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/maps"
)

// TestKeyAndFlagsOf: a VIP's address, protocol, hash and quic block become the key and flags the
// forwarder reads, and the server ID limits config checks agree with the flags'.
func TestKeyAndFlagsOf(t *testing.T) {
	c, err := config.Parse([]byte(`interface: eth0
vips:
  - {name: web, address: 198.18.100.1, port: 80, backends: [{address: 198.18.3.1}]}
  - {name: v6, address: "fd00:5e:100::1", protocol: UDP, hash: source-only, backends: [{address: "fd00:5e:3::1"}]}
  - {name: nsp, address: 198.18.100.3, port: 53, protocol: udp, hash: no-source-port, backends: [{address: 198.18.3.1}]}
  - name: h3
    address: 198.18.100.1
    port: 443
    protocol: udp
    quic: {enabled: true, scheme: quic-lb, server_id_len: 2, config_id: 1}
    backends: [{address: 198.18.3.1, server_id: 513}]
  - name: h3k
    address: 198.18.100.2
    port: 443
    protocol: udp
    quic: {enabled: true, scheme: katran}
    backends: [{address: 198.18.3.1, server_id: 513}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		key   string
		flags maps.VIPFlags
	}{
		{"198.18.100.1:80/tcp", 0},
		{"[fd00:5e:100::1]:0/udp", maps.HashSrcOnly},
		{"198.18.100.3:53/udp", maps.NoSrcPort},
		{"198.18.100.1:443/udp", 0},
		{"198.18.100.2:443/udp", maps.QUICKatran},
	} {
		v := &c.VIPs[i]
		if k := KeyOf(v); k.String() != want.key {
			t.Errorf("%s: key %s, want %s", v.Name, k, want.key)
		}
		if f := FlagsOf(v); v.Name != "h3" && f != want.flags {
			t.Errorf("%s: flags %#x, want %#x", v.Name, uint32(f), uint32(want.flags))
		}
	}
	f := FlagsOf(&c.VIPs[3])
	if !f.QUIC() || f&maps.QUICLB == 0 || f.QUICServerIDLen() != 2 || f.QUICConfigID() != 1 || f.QUICMaxServerID() != 0xffff {
		t.Errorf("quic-lb flags %#x", uint32(f))
	}
	for _, q := range []config.QUIC{{Enabled: true, Scheme: config.QUICSchemeKatran}, {Enabled: true},
		{Enabled: true, ServerIDLen: 1}, {Enabled: true, ServerIDLen: 3, ConfigID: 6}, {Enabled: true, ServerIDLen: 4}} {
		v := config.VIP{Protocol: "udp", QUIC: q}
		f := FlagsOf(&v)
		if q.MaxServerID() != f.QUICMaxServerID() || q.IDLen() != f.QUICServerIDLen() {
			t.Errorf("%+v: config says id length %d up to %d, the flags %d up to %d", q,
				q.IDLen(), q.MaxServerID(), f.QUICServerIDLen(), f.QUICMaxServerID())
		}
	}
}
