package config

import (
	"errors"
	"strings"
	"testing"
)

const quicSample = `interface: eth0
vips:
  - name: h3
    address: 198.18.100.1
    port: 443
    protocol: udp
    quic: {enabled: true, scheme: quic-lb, server_id_len: 2, config_id: 1}
    backends:
      - {address: 198.18.3.1, server_id: 513}
      - {address: 198.18.3.2, server_id: 2}
  - name: h3k
    address: 198.18.100.2
    port: 443
    protocol: udp
    quic: {enabled: true, scheme: katran}
    backends:
      - {address: 198.18.3.1, server_id: 513}
`

// TestQUICConfig: the quic block is read with its defaults (control/reconcile tests the VIP flags
// it becomes).
func TestQUICConfig(t *testing.T) {
	c, err := Parse([]byte(quicSample))
	if err != nil {
		t.Fatal(err)
	}
	if q := c.VIPs[0].QUIC; q.IDLen() != 2 || q.ConfigID != 1 || q.MaxServerID() != 0xffff {
		t.Fatalf("quic-lb settings %+v: id length %d, max server id %d", q, q.IDLen(), q.MaxServerID())
	}
	if q := c.VIPs[1].QUIC; q.IDLen() != 0 || q.MaxServerID() != 1<<32-1 {
		t.Fatalf("katran settings %+v: id length %d, max server id %d", q, q.IDLen(), q.MaxServerID())
	}
	if c.VIPs[0].Backends[0].ServerID != 513 {
		t.Fatal("server_id not read")
	}
	d, err := Parse([]byte(strings.Replace(quicSample, "server_id_len: 2, ", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if n := d.VIPs[0].QUIC.IDLen(); n != DefaultQUICServerIDLen {
		t.Fatalf("default server_id_len %d", n)
	}
	plain := c.VIPs[0]
	plain.QUIC = QUIC{}
	if plain.Equal(c.VIPs[0]) {
		t.Fatal("Equal ignores the quic block")
	}
}

// TestQUICConfigErrors: each mistake is reported at its line and field with the fix.
func TestQUICConfigErrors(t *testing.T) {
	cases := []struct{ from, to, field, msg string }{
		{"protocol: udp\n    quic: {enabled: true, scheme: quic-lb", "protocol: tcp\n    quic: {enabled: true, scheme: quic-lb", "vips[0].quic.enabled", "protocol: udp"},
		{"scheme: quic-lb", "scheme: quic-xx", "vips[0].quic.scheme", "quic-lb or katran"},
		{"server_id_len: 2", "server_id_len: 5", "vips[0].quic.server_id_len", "1..4"},
		{"config_id: 1", "config_id: 7", "vips[0].quic.config_id", "0..6"},
		{"scheme: katran}", "scheme: katran, server_id_len: 2}", "vips[1].quic.server_id_len", "remove server_id_len"},
		{"{address: 198.18.3.2, server_id: 2}", "{address: 198.18.3.2, server_id: 70000}", "vips[0].backends[1].server_id", "does not fit"},
		{"{address: 198.18.3.2, server_id: 2}", "{address: 198.18.3.2, server_id: 513}", "vips[0].backends[1].server_id", "also 198.18.3.1's"},
		{"{address: 198.18.3.2, server_id: 2}", "{address: 198.18.3.2}", "vips[0].backends[1].server_id", "every backend of the VIP a server_id, or none"},
		{"      - {address: 198.18.3.1, server_id: 513}\n`", "      - {address: 198.18.3.1, server_id: 514}\n`", "vips[1].backends[0].server_id", "one server ID in every VIP"},
		{"quic: {enabled: true, scheme: katran}", "quic: {scheme: katran}", "vips[1].quic.enabled", "enabled: true"},
		{"      - {address: 198.18.3.1, server_id: 513}\n`", "      - {address: 198.18.3.1}\n`", "vips[1].backends[0].server_id", "one server ID in every VIP"},
	}
	for _, c := range cases {
		src := quicSample + "`"
		if !strings.Contains(src, c.from) {
			t.Fatalf("case %q: sample lacks %q", c.msg, c.from)
		}
		src = strings.Replace(src, c.from, c.to, 1)
		_, err := Parse([]byte(strings.TrimSuffix(src, "`")))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(fe.Msg, c.msg) || fe.Line == 0 {
			t.Errorf("%s -> %s: got %v, want %s: ...%s", c.from, c.to, err, c.field, c.msg)
		}
	}
}
