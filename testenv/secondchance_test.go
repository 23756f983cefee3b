package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/fwd"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// TestSecondChance: keep-alive connections are established through a balancer while the VIP has
// three backends; a fourth backend is added (the Maglev table changes, about a quarter of the
// slots move to it) and the balancer forgets every flow (as a balancer that takes over flows it
// never saw, after ECMP moved them), so each connection's next packet is a mid-stream miss hashed
// on the new table. With second chance, the new table's pick that does not hold the connection
// sends it on to the previous table's pick, which does, and >= 99% of the connections complete
// their next request; without it, the connections that moved break, and the test reports how
// many. IPv4 (IP option) and IPv6 (destination options) both go through the lab router.
func TestSecondChance(t *testing.T) {
	l := testLabSpec(t, lab.Spec{Clients: 1, Balancers: 1, Backends: 4})
	if err := l.AttachBackendPortPass(); err != nil {
		t.Fatal(err)
	}
	withApps(t, l)
	f := withForwarder(t, l)
	bes := l.Topo.ByRole(topo.Backend)
	const perFamily = 100
	for _, on := range []bool{false, true} {
		if err := f.SetSecondChance(on); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"web", "web6"} {
			v := l.VIP(name)
			setBackends(t, f, v, v.Backends[:3]) // be4 out
			conns, first := establish(t, l, v, perFamily)
			setBackends(t, f, v, v.Backends) // be4 in: the table changes
			if _, err := f.Maps.DeleteAllFlows(); err != nil {
				t.Fatal(err)
			}
			before := counterSnapshot(t, f, bes)
			ok, moved := 0, 0
			for i, c := range conns {
				be, err := c.do(fmt.Sprintf("/after/%d", i))
				if err == nil && be == first[i] {
					ok++
				}
				c.c.Close()
			}
			after := counterSnapshot(t, f, bes)
			moved = int(after["be4 second_chance_forwarded"] - before["be4 second_chance_forwarded"])
			pct := 100 * float64(ok) / float64(len(conns))
			t.Logf("second_chance=%v %s: %d/%d established connections completed their next request (%.1f%%); second_chance_sent +%d, be4 forwarded +%d packets, owned elsewhere +%d",
				on, name, ok, len(conns), pct, after["lb second_chance_sent"]-before["lb second_chance_sent"], moved,
				after["owned"]-before["owned"])
			if on {
				if pct < 99 {
					t.Errorf("second chance on, %s: %.1f%% of the connections survived, want >= 99%%", name, pct)
				}
				if r := after["refused"] - before["refused"]; r != 0 {
					t.Errorf("second chance on, %s: the backends refused %d packets: the lab's allow-lists miss its balancer sources or backends", name, r)
				}
				if moved == 0 || after["lb second_chance_sent"] == before["lb second_chance_sent"] {
					t.Errorf("second chance on, %s: nothing carried a candidate or was forwarded: the table change moved no flow?", name)
				}
			} else if ok == len(conns) {
				t.Errorf("second chance off, %s: every connection survived although the table moved some to be4", name)
			}
		}
	}
}

// setBackends makes a VIP's ring the weight-1 table of the given backends (the forwarder leaves
// the old table as the previous ring).
func setBackends(t *testing.T, f *fwd.Forwarder, v lab.VIP, addrs []netip.Addr) {
	t.Helper()
	bs := make([]fwd.Backend, len(addrs))
	for i, a := range addrs {
		bs[i] = fwd.Backend{Addr: a, Weight: 1}
	}
	if err := f.SetVIP(v.Key, v.ID, 0, bs); err != nil {
		t.Fatal(err)
	}
}

// establish opens n keep-alive connections to a VIP from client 1 and makes one request on each,
// returning the connections and the backend that answered each.
func establish(t *testing.T, l *lab.Lab, v lab.VIP, n int) ([]*keepAliveConn, []string) {
	t.Helper()
	addr := net.JoinHostPort(v.Address, fmt.Sprint(v.Port))
	conns := make([]*keepAliveConn, n)
	first := make([]string, n)
	for i := range conns {
		c, err := dialKeepAlive(l.Client(1).NS, addr)
		if err != nil {
			t.Fatalf("connection %d to %s: %v", i, addr, err)
		}
		t.Cleanup(func() { c.c.Close() })
		conns[i] = c
		if first[i], err = c.do(fmt.Sprintf("/before/%d", i)); err != nil {
			t.Fatalf("connection %d to %s, first request: %v", i, addr, err)
		}
	}
	return conns, first
}

// counterSnapshot reads the balancer's and the backends' second-chance counters.
func counterSnapshot(t *testing.T, f *fwd.Forwarder, bes []topo.Node) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	cs, err := f.Maps.Counters()
	if err != nil {
		t.Fatal(err)
	}
	out["lb second_chance_sent"] = cs["second_chance_sent"].Packets
	for _, n := range bes {
		dc, err := lab.DecapCounters(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n.Name+" second_chance_forwarded"] = dc["second_chance_forwarded"].Packets
		out["owned"] += dc["second_chance_owned"].Packets
		out["refused"] += dc["second_chance_refused"].Packets
	}
	return out
}

// TestSecondChanceDaemon is TestSecondChance through the real daemon (`switchyard lb run`): its
// default (second_chance on) and then `second_chance: false` in its file, reloaded. The table
// changes through the CLI (`backend drain`, then `backend undrain` of be4), and the balancer
// forgets its flows (the test empties the pinned connection table).
func TestSecondChanceDaemon(t *testing.T) {
	d := newDaemonLab(t, 4)
	l := d.Lab()
	lb := l.Balancer()
	be4 := l.Topo.ByRole(topo.Backend)[3].Addr4.String()
	// The connection tables: IPv4 flows (the VIP's) in conntrack4, IPv6 flows in conntrack.
	var cts []*ebpf.Map
	for _, name := range []string{bpfobj.LBMapConntrack4, bpfobj.LBMapConntrack} {
		ct, err := ebpf.LoadPinnedMap(filepath.Join(loader.MapsDir(lab.PinDir(lb.NS, lb.Iface)), name), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ct.Close()
		cts = append(cts, ct)
	}
	cfgPath := filepath.Join(lab.StateDir(d.Prefix), lb.NS+".yaml")
	for _, on := range []bool{true, false} {
		if !on {
			c, err := config.Load(cfgPath)
			if err != nil {
				t.Fatal(err)
			}
			off := false
			c.SecondChance = &off
			if err := c.Save(cfgPath); err != nil {
				t.Fatal(err)
			}
			if _, err := d.cli("lb", "config", "reload"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := d.cli("backend", "drain", "web", be4); err != nil {
			t.Fatal(err)
		}
		conns, first := establish(t, l, l.VIP("web"), 100)
		if _, err := d.cli("backend", "undrain", "web", be4); err != nil {
			t.Fatal(err)
		}
		for _, ct := range cts {
			forgetAll(t, ct)
		}
		ok := 0
		for i, c := range conns {
			if be, err := c.do(fmt.Sprintf("/after/%d", i)); err == nil && be == first[i] {
				ok++
			}
		}
		if on {
			checkFlowShowsCandidate(t, d, conns, first)
		}
		for _, c := range conns {
			c.c.Close()
		}
		pct := 100 * float64(ok) / float64(len(conns))
		t.Logf("daemon, second_chance=%v: %d/%d established connections completed their next request (%.1f%%)", on, ok, len(conns), pct)
		if on && pct < 99 {
			t.Errorf("second chance on: %.1f%% of the connections survived, want >= 99%%", pct)
		}
		if !on && ok == len(conns) {
			t.Error("second chance off: every connection survived although the table moved some to be4")
		}
	}
}

// forgetAll empties a pinned connection table (either family's: keys are read as bytes).
func forgetAll(t *testing.T, ct *ebpf.Map) {
	t.Helper()
	var keys [][]byte
	k := make([]byte, ct.KeySize())
	v := make([]byte, ct.ValueSize())
	for it := ct.Iterate(); it.Next(&k, &v); {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := ct.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			t.Fatal(err)
		}
	}
}

// checkFlowShowsCandidate: `lb flow` names the second candidate of a rescued connection, the
// backend that answered it before the table changed.
func checkFlowShowsCandidate(t *testing.T, d *daemonLab, conns []*keepAliveConn, first []string) {
	t.Helper()
	addrOf := map[string]string{}
	for _, n := range d.Lab().Topo.ByRole(topo.Backend) {
		addrOf[n.Name] = n.Addr4.String()
	}
	seen := 0
	for i, c := range conns {
		out, err := d.cli("lb", "flow", "--json", "tcp", c.c.LocalAddr().String(), c.c.RemoteAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		var fi api.FlowInfo
		if err := json.Unmarshal(out, &fi); err != nil {
			t.Fatalf("decode lb flow: %v: %s", err, out)
		}
		if fi.SecondChance == "" {
			continue
		}
		if fi.SecondChance != addrOf[first[i]] {
			t.Fatalf("lb flow: second chance %s, want %s (%s), the connection's backend", fi.SecondChance, addrOf[first[i]], first[i])
		}
		if seen++; seen == 3 {
			return
		}
	}
	t.Errorf("lb flow showed a second candidate for %d connections, want some", seen)
}
