package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sample = `interface: eth0
xdp_mode: native
metrics: 127.0.0.1:9100
next_hop: 198.18.0.1
mtu: 1500
icmp_too_big: true
encap_source4: 198.18.255.0
encap_source6: "fd00:5e::"
udp_timeout: 30s
drain_timeout: 5m
ring_size: 65537
max_vips: 64
conn_table_size: 262144
all_backends_down: keep
vips:
  - name: web
    address: 198.18.100.1
    port: 80
    protocol: tcp
    hash: five-tuple
    health: {type: http, port: 80, path: /health, expect_status: 200, interval: 1s, timeout: 500ms, rise: 2, fall: 3}
    backends:
      - {address: 198.18.3.1, weight: 1}
      - {address: 198.18.3.2, weight: 3}
      - {address: 198.18.3.3, drained: true}
  - address: fd00:5e:100::1
    port: 0
    protocol: udp
    hash: source-only
    backends:
      - {address: "fd00:5e:3::1"}
`

func TestParseSample(t *testing.T) {
	c, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	if c.PinDir != "/sys/fs/bpf/switchyard/eth0" || c.Socket != "/run/switchyard/eth0.sock" {
		t.Errorf("defaults: pin %q socket %q", c.PinDir, c.Socket)
	}
	if c.DrainTimeout.D() != 5*time.Minute || c.UDPTimeout.D() != 30*time.Second {
		t.Errorf("durations: %v %v", c.DrainTimeout.D(), c.UDPTimeout.D())
	}
	w := c.VIPs[0]
	if w.Health.Timeout.D() != 500*time.Millisecond || w.Health.Rise != 2 || w.Health.ExpectStatus != 200 {
		t.Errorf("health: %+v", *w.Health)
	}
	if w.Backends[2].Weight != 1 || !w.Backends[2].Drained || w.Backends[1].Weight != 3 {
		t.Errorf("backends: %+v", w.Backends)
	}
	v6 := c.VIPs[1]
	if v6.Name != "[fd00:5e:100::1]:0/udp" {
		t.Errorf("default name %q", v6.Name)
	}
	if k := v6.key(); k.proto != ProtocolUDP || k.ap.Port() != 0 || !k.ap.Addr().Is6() {
		t.Errorf("key %v", k)
	}
}

// TestErrorsNameLineAndField checks that every kind of mistake is reported at its line, with
// the field path and a fix.
func TestErrorsNameLineAndField(t *testing.T) {
	cases := []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"missing interface", "vips: []\n", 1, "interface: missing"},
		{"bad mode", "interface: eth0\nxdp_mode: turbo\n", 2, "xdp_mode: unknown mode \"turbo\": use native or generic"},
		{"bad vip address", "interface: eth0\nvips:\n  - name: a\n    address: 300.1.1.1\n    port: 80\n", 4, "vips[0].address: invalid address"},
		{"bad backend", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: 80\n    backends:\n      - address: 198.18.3.1\n      - address: nope\n", 7, "vips[0].backends[1].address"},
		{"dup backend", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: 80\n    backends:\n      - address: 198.18.3.1\n      - address: 198.18.3.1\n", 7, "already listed"},
		{"bad protocol", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: 80\n    protocol: sctp\n", 5, "use tcp or udp"},
		{"bad hash", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    hash: random\n", 4, "vips[0].hash: unknown hash"},
		{"bad health type", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: 80\n    health:\n      type: icmp\n", 6, "vips[0].health.type"},
		{"health port needed", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    health: {type: tcp}\n", 4, "name the port to probe"},
		{"bad health mode", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: 80\n    health: {type: tcp, mode: tunel}\n", 5, "vips[0].health.mode: unknown mode \"tunel\": use tunnel"},
		{"bad global health mode", "interface: eth0\nhealth_mode: vip\n", 2, "line 2: health_mode: unknown mode \"vip\""},
		{"timeout over interval", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: 80\n    health: {type: tcp, interval: 1s, timeout: 2s}\n", 5, "longer than the interval"},
		{"bad duration", "interface: eth0\ndrain_timeout: soon\n", 2, "parse duration \"soon\""},
		{"unknown field", "interface: eth0\ndrain_timout: 5m\n", 2, "line 2: drain_timout: unknown field: did you mean `drain_timeout`?"},
		{"port range", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: 70000\n", 4, "vips[0].port: `70000` is out of range: write one in 0..65535"},
		{"port type", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: eighty\n", 4, "vips[0].port: `eighty` is not a whole number"},
		{"indentation", "interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: 80\n   backends: []\n", 5, "backends: indented to column 4, which lines up with no field above: align it with `address` (column 5)"},
		{"tab", "interface: eth0\nvips:\n  - address: 198.18.100.1\n\tport: 80\n", 4, "port: a tab in the indentation: YAML indents with spaces only: replace the tab with spaces"},
		{"weight 0", "interface: eth0\nvips:\n  - name: web\n    address: 198.18.100.1\n    port: 80\n    backends:\n      - {address: 198.18.3.1, weight: 0}\n", 7, "vips[0].backends[0].weight: 0 is not a weight: use 1..65536 (left out means 1); to take the backend out of new flows write `drained: true` or run `switchyard backend drain web 198.18.3.1`"},
		{"ring not prime", "interface: eth0\nring_size: 65536\n", 2, "ring_size: 65536 is not a prime"},
		{"policy", "interface: eth0\nall_backends_down: panic\n", 2, "use keep or drop"},
		{"dup vip", "interface: eth0\nvips:\n  - {name: a, address: 198.18.100.1, port: 80}\n  - {name: b, address: 198.18.100.1, port: 80}\n", 4, "already defined by vips[0]"},
		{"dup name", "interface: eth0\nvips:\n  - {name: a, address: 198.18.100.1, port: 80}\n  - {name: a, address: 198.18.100.1, port: 81}\n", 4, "name \"a\" already used"},
		{"empty", "", 0, "empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			var fe *FieldError
			if errors.As(err, &fe) {
				if fe.Line != tc.line {
					t.Errorf("line %d, want %d (%v)", fe.Line, tc.line, err)
				}
			} else if tc.line != 0 && !strings.Contains(err.Error(), "line "+itoa(tc.line)) {
				t.Errorf("error %q does not name line %d", err, tc.line)
			}
		})
	}
}

func TestSaveRoundTrip(t *testing.T) {
	c, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	c.ApplyDefaults()
	p := filepath.Join(t.TempDir(), "lb.yaml")
	if err := c.Save(p); err != nil {
		t.Fatal(err)
	}
	d, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := c.Marshal()
	b, _ := d.Marshal()
	if string(a) != string(b) {
		t.Errorf("round trip differs:\n%s\n---\n%s", a, b)
	}
	// Clone is deep: changing the clone leaves the original.
	e := c.Clone()
	e.VIPs[0].Backends[0].Drained = true
	e.VIPs[0].Health.Rise = 9
	if c.VIPs[0].Backends[0].Drained || c.VIPs[0].Health.Rise == 9 {
		t.Error("clone shares backends or health with the original")
	}
}

func TestFindVIPAndRefs(t *testing.T) {
	c, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	for ref, want := range map[string]int{"web": 0, "198.18.100.1:80": 0, "198.18.100.1:80/tcp": 0, "[fd00:5e:100::1]:0/udp": 1, "fd00:5e:100::1/udp": 1} {
		if i, err := c.FindVIP(ref); err != nil || i != want {
			t.Errorf("FindVIP(%q) = %d, %v; want %d", ref, i, err, want)
		}
	}
	if _, err := c.FindVIP("198.18.100.1:80/udp"); err == nil || !strings.Contains(err.Error(), "configured: web") {
		t.Errorf("unknown vip error %v", err)
	}
	if _, err := c.VIPs[0].FindBackend("198.18.9.9"); err == nil || !strings.Contains(err.Error(), "backend list web") {
		t.Errorf("unknown backend error %v", err)
	}
	if _, err := c.VIPs[0].FindBackend("x"); err == nil || !strings.Contains(err.Error(), "invalid backend address") {
		t.Errorf("invalid backend error %v", err)
	}
	if _, _, err := ParseAddrPort("198.18.1:80"); err == nil {
		t.Error("accepted a bad address")
	}
}

// TestSizesCheckedLikeTheLoader: config check refuses what the loader refuses, and warns, naming
// the ring to use, when a VIP has more backends than its ring serves well.
func TestSizesCheckedLikeTheLoader(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"interface: eth0\nmax_backends: 70000\n", "max_backends: 70000 above 65536"},
		{"interface: eth0\nring_sizing: fixed\nmax_vips: 40000\n", "max_vips: max_vips 40000 x ring_size 65537"},
		{"interface: eth0\nring_sizing: fixes\n", "ring_sizing: unknown mode"},
		{"interface: eth0\nring_slots: 100\nvips: [{address: 198.18.0.1, port: 80, backends: [{address: 10.0.0.1}]}]\n", "line 2: ring_slots: the VIPs' rings need 101 slots"},
		{"interface: eth0\nvips: [{address: 198.18.0.1, port: 80, ring_size: 100, backends: [{address: 10.0.0.1}]}]\n", "vips[0].ring_size: maglev table size 100 is not prime"},
	} {
		c, err := Parse([]byte(tc.yaml))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	c := &Config{Interface: "eth0", VIPs: []VIP{{Name: "big", Address: "198.18.0.1", Port: 80}}}
	for i := 0; i < 1000; i++ {
		c.VIPs[0].Backends = append(c.VIPs[0].Backends, Backend{Address: fmt.Sprintf("10.0.%d.%d", i/250, 1+i%250)})
	}
	w := c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "use ring_size: 100003") {
		t.Errorf("warnings %q, want one naming ring_size 100003", w)
	}
	c.RingSize = 100003
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings at ring 100003: %q", w)
	}
}

// TestHealthModeOf: a VIP's own mode wins, then the file's health_mode, then tunnel.
func TestHealthModeOf(t *testing.T) {
	c, err := Parse([]byte("interface: eth0\nvips:\n  - {name: a, address: 198.18.100.1, port: 80, health: {type: tcp}}\n  - {name: b, address: 198.18.100.2, port: 80, health: {type: tcp, mode: direct}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := c.HealthModeOf(&c.VIPs[0]), c.HealthModeOf(&c.VIPs[1]); a != HealthTunnel || b != HealthDirect {
		t.Errorf("default: a=%s b=%s, want tunnel direct", a, b)
	}
	c.HealthMode = HealthDirect
	c.VIPs[1].Health.Mode = HealthTunnel
	if a, b := c.HealthModeOf(&c.VIPs[0]), c.HealthModeOf(&c.VIPs[1]); a != HealthDirect || b != HealthTunnel {
		t.Errorf("health_mode direct: a=%s b=%s, want direct tunnel", a, b)
	}
}
