package config

import (
	"strings"
	"testing"
	"time"
)

const bgpSample = `interface: eth0
vips:
  - {address: 198.18.100.1, port: 80, backends: [{address: 198.18.3.1}]}
bgp:
  asn: 65001
  router_id: 198.18.2.11
  next_hop: 198.18.2.11
  next_hop6: "fd00:5e:2::11"
  communities: ["65001:100", no-export]
  drain_grace: 10s
  graceful_restart: {restart_time: 60s}
  peers:
    - {address: 198.18.2.1, asn: 65000, hold_time: 3s, password: s3cret, bfd: {min_rx: 100ms, min_tx: 150ms, multiplier: 5}}
    - {address: "fd00:5e:2::1", asn: 65000, bfd: {}}
`

func TestParseBGP(t *testing.T) {
	c, err := Parse([]byte(bgpSample))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	b := c.BGP
	if b.ASN != 65001 || len(b.Peers) != 2 || b.Peers[0].HoldTime.D() != 3*time.Second || b.Peers[0].Password != "s3cret" {
		t.Fatalf("bgp: %+v", b)
	}
	if b.Peers[1].HoldTime.D() != DefaultBGPHoldTime || b.Peers[1].Port != 179 || b.DrainGrace.D() != 10*time.Second {
		t.Errorf("defaults: %+v", b.Peers[1])
	}
	if f := b.Peers[0].BFD; f.MinRx.D() != 100*time.Millisecond || f.MinTx.D() != 150*time.Millisecond || f.Multiplier != 5 {
		t.Errorf("bfd: %+v", f)
	}
	if f := b.Peers[1].BFD; f.MinRx.D() != DefaultBFDInterval || f.MinTx.D() != DefaultBFDInterval || f.Multiplier != DefaultBFDMultiplier {
		t.Errorf("bfd defaults: %+v", f)
	}
	if b.RestartTime() != time.Minute {
		t.Errorf("restart time %s", b.RestartTime())
	}
	n := c.Clone()
	n.BGP.Peers[0].ASN = 1
	n.BGP.Peers[0].BFD.Multiplier = 9
	n.BGP.GracefulRestart.RestartTime = 0
	if c.BGP.Peers[0].ASN != 65000 || c.BGP.Peers[0].BFD.Multiplier != 5 || c.BGP.RestartTime() != time.Minute {
		t.Error("clone shares the peers, their BFD or graceful restart")
	}
	out, _ := c.Marshal()
	back, err := Parse(out)
	if err != nil || back.BGP.Peers[0].HoldTime != b.Peers[0].HoldTime {
		t.Errorf("round trip: %v\n%s", err, out)
	}
	if v, _ := ParseCommunity("65001:100"); v != 65001<<16|100 {
		t.Errorf("community %x", v)
	}
}

func TestNoBGPSectionIsNil(t *testing.T) {
	c, err := Parse([]byte("interface: eth0\nvips: []\n"))
	if err != nil || c.BGP != nil {
		t.Fatalf("%v %+v", err, c.BGP)
	}
	c.ApplyDefaults()
	out, _ := c.Marshal()
	if strings.Contains(string(out), "bgp") {
		t.Errorf("a config without bgp writes one:\n%s", out)
	}
}

func TestBGPErrors(t *testing.T) {
	for _, tc := range []struct{ replace, with, want string }{
		{"  asn: 65001\n", "", "bgp.asn: missing"},
		{"router_id: 198.18.2.11", "router_id: fd00::1", "line 6: bgp.router_id: invalid router id"},
		{"next_hop: 198.18.2.11", "next_hop: x", "line 7: bgp.next_hop: invalid IPv4 next hop"},
		{`next_hop6: "fd00:5e:2::11"`, "next_hop6: 198.18.2.11", "line 8: bgp.next_hop6: invalid IPv6"},
		{`"65001:100"`, `"65001:70000"`, "line 9: bgp.communities[0]: community"},
		{"hold_time: 3s", "hold_time: 1s", "line 13: bgp.peers[0].hold_time: 1s out of range"},
		{"hold_time: 3s", "hold_time: 3500ms", "bgp.peers[0].hold_time: 3.5s out of range"},
		{"address: 198.18.2.1, asn: 65000,", "address: 198.18.2.1,", "line 13: bgp.peers[0].asn: missing"},
		{"address: 198.18.2.1,", "address: 198.18.2,", "line 13: bgp.peers[0].address: invalid address"},
		{`"fd00:5e:2::1"`, "198.18.2.1", "line 14: bgp.peers[1].address: 198.18.2.1 already listed as peers[0]"},
		{"drain_grace: 10s", "drain_grace: soon", "line 10: bgp.drain_grace: parse duration"},
		{"  asn: 65001\n", "  asn: 65001\n  colour: red\n", "line 6: bgp.colour: unknown field"},
		{"min_rx: 100ms", "min_rx: 5ms", "line 13: bgp.peers[0].bfd.min_rx: 5ms out of range: give whole milliseconds from 10ms"},
		{"min_tx: 150ms", "min_tx: 100500us", "bgp.peers[0].bfd.min_tx: 100.5ms out of range"},
		{"min_tx: 150ms", "min_tx: 2m", "bgp.peers[0].bfd.min_tx: 2m0s out of range"},
		{"multiplier: 5", "multiplier: 256", "bgp.peers[0].bfd.multiplier: 256 out of range: give 1 to 255"},
		{"multiplier: 5", "multiplier: -1", "bgp.peers[0].bfd.multiplier: -1 out of range"},
		{"min_rx: 100ms", "min_rx: fast", "bgp.peers[0].bfd.min_rx: parse duration"},
		{"bfd: {}", "bfd: {echo: true}", "line 14: bgp.peers[1].bfd.echo: unknown field"},
		{"restart_time: 60s", "restart_time: 5000s", "line 11: bgp.graceful_restart.restart_time: 1h23m20s out of range: the restart time is whole seconds from 1s to 4095s"},
		{"restart_time: 60s", "restart_time: 1500ms", "bgp.graceful_restart.restart_time: 1.5s out of range"},
	} {
		t.Run(tc.replace, func(t *testing.T) {
			in := strings.Replace(bgpSample, tc.replace, tc.with, 1)
			if in == bgpSample {
				t.Fatalf("replace %q: not in the sample", tc.replace)
			}
			_, err := Parse([]byte(in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q -> %q: got %v, want %q", tc.replace, tc.with, err, tc.want)
			}
		})
	}
	_, err := Parse([]byte("interface: eth0\nvips: []\nbgp:\n  asn: 65001\n"))
	if err == nil || !strings.Contains(err.Error(), "bgp.peers: no peer") {
		t.Errorf("no peers: %v", err)
	}
}

// TestBGPGracefulRestartDefaults: graceful restart is on with 120s unless turned off.
func TestBGPGracefulRestartDefaults(t *testing.T) {
	off := false
	for _, tc := range []struct {
		gr   *GracefulRestart
		want time.Duration
	}{
		{nil, DefaultBGPRestartTime},
		{&GracefulRestart{}, DefaultBGPRestartTime},
		{&GracefulRestart{RestartTime: Duration(30 * time.Second)}, 30 * time.Second},
		{&GracefulRestart{Enabled: &off, RestartTime: Duration(30 * time.Second)}, 0},
	} {
		b := BGP{GracefulRestart: tc.gr}
		if got := b.RestartTime(); got != tc.want {
			t.Errorf("%+v: restart time %s, want %s", tc.gr, got, tc.want)
		}
	}
}
