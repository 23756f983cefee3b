package daemon

import (
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/health"
	"github.com/switchyard/switchyard/loader"
)

// TestProbeMarks: a backend keeps its mark across syncs (a changed mark would restart its check),
// a released mark is reused, every mark is in the probe range, and the specs of a tunnel VIP name
// the VIP, the mark and the interface while a direct VIP's stay plain.
func TestProbeMarks(t *testing.T) {
	c, err := config.Parse([]byte(`interface: eth9
vips:
  - {name: t, address: 198.18.100.1, port: 80, health: {type: tcp}, backends: [{address: 198.18.3.1}, {address: 198.18.3.2}]}
  - {name: d, address: 198.18.100.2, port: 80, health: {type: tcp, mode: direct}, backends: [{address: 198.18.3.3}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{cfg: c, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	specs := func() map[health.Key]health.Spec {
		want := map[health.Key]health.Spec{}
		for i := range d.cfg.VIPs {
			v := &d.cfg.VIPs[i]
			for _, b := range v.Backends {
				a := netip.MustParseAddr(b.Address)
				s := health.Spec{Type: "tcp", Addr: netip.AddrPortFrom(a, 80)}
				if d.cfg.HealthModeOf(v) == config.HealthTunnel {
					d.tunnelSpec(&s, v, a)
				}
				want[health.Key{VIP: v.Name, Backend: a}] = s
			}
		}
		d.syncProbeTargetsLocked(want)
		return want
	}
	k := func(vip, a string) health.Key { return health.Key{VIP: vip, Backend: netip.MustParseAddr(a)} }
	first := specs()
	t1 := first[k("t", "198.18.3.1")]
	if t1.Mode != health.ModeTunnel || t1.Target != netip.MustParseAddrPort("198.18.100.1:80") || t1.Device != "eth9" || t1.Mark&loader.ProbeMarkMask != loader.ProbeMarkBase {
		t.Errorf("tunnel spec %+v", t1)
	}
	if t2 := first[k("t", "198.18.3.2")]; t2.Mark == t1.Mark {
		t.Errorf("two backends share mark %#x", t1.Mark)
	}
	if s := first[k("d", "198.18.3.3")]; s.Mode != "" || s.Mark != 0 || s.ProbeMode() != health.ModeDirect {
		t.Errorf("direct spec %+v", s)
	}
	if again := specs(); again[k("t", "198.18.3.1")] != t1 {
		t.Errorf("a second sync changed the spec: %+v, was %+v", again[k("t", "198.18.3.1")], t1)
	}
	// 198.18.3.1 leaves (its mark is released once the sync is done), 198.18.3.2 keeps its own;
	// the next new backend takes the released mark.
	m2 := first[k("t", "198.18.3.2")].Mark
	d.cfg.VIPs[0].Backends[0].Address = "198.18.3.9"
	after := specs()
	if got := after[k("t", "198.18.3.9")].Mark; got == m2 || got == t1.Mark {
		t.Errorf("new backend got mark %#x, in use or not yet released", got)
	}
	d.cfg.VIPs[0].Backends = append(d.cfg.VIPs[0].Backends, config.Backend{Address: "198.18.3.10", Weight: 1})
	if got := specs()[k("t", "198.18.3.10")].Mark; got != t1.Mark {
		t.Errorf("next backend got mark %#x, want the released %#x", got, t1.Mark)
	}
	if got := after[k("t", "198.18.3.2")].Mark; got != m2 {
		t.Errorf("a staying backend's mark moved from %#x to %#x", m2, got)
	}
	if len(d.tp.marks) != 3 {
		t.Errorf("marks %v, want three", d.tp.marks)
	}
}
