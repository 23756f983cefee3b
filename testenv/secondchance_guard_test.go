package testenv

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
)

// TestSecondChanceRefused is TestSecondChance with the new pick's (be4's) allow-lists changed:
// emptied (forwarding off, the default of a decap nobody configured), or with a candidate
// prefix that holds none of the backends. be4 then refuses to send the moved connections on,
// decapsulates them and its stack resets them (as without second chance): they break, be4
// counts them second_chance_refused with the reason and forwards nothing.
func TestSecondChanceRefused(t *testing.T) {
	l := testLabSpec(t, lab.Spec{Clients: 1, Balancers: 1, Backends: 4})
	if err := l.AttachBackendPortPass(); err != nil {
		t.Fatal(err)
	}
	withApps(t, l)
	f := withForwarder(t, l)
	if err := f.SetSecondChance(true); err != nil {
		t.Fatal(err)
	}
	bes := l.Topo.ByRole(topo.Backend)
	be4 := bes[3]
	seg := l.Topo.Segment(be4.Segment)
	sources := []netip.Prefix{netip.PrefixFrom(lab.Encap4, 24), netip.PrefixFrom(lab.Encap6, 64)}
	for _, c := range []struct {
		name           string
		peers, sources []netip.Prefix
		reason         string
	}{
		{"lists empty", nil, nil, "second_chance_refused_source"},
		{"candidates outside the peers", []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8::/64")}, sources, "second_chance_refused_candidate"},
	} {
		setDecapLists(t, be4, c.peers, c.sources)
		for _, name := range []string{"web", "web6"} {
			v := l.VIP(name)
			setBackends(t, f, v, v.Backends[:3])
			conns, first := establish(t, l, v, 50)
			setBackends(t, f, v, v.Backends)
			if _, err := f.Maps.DeleteAllFlows(); err != nil {
				t.Fatal(err)
			}
			before := decapSnapshot(t, be4)
			ok := 0
			for i, cn := range conns {
				if be, err := cn.do(fmt.Sprintf("/after/%d", i)); err == nil && be == first[i] {
					ok++
				}
				cn.c.Close()
			}
			after := decapSnapshot(t, be4)
			d := func(n string) uint64 { return after[n].Packets - before[n].Packets }
			t.Logf("%s, %s: %d/%d connections survived; be4 refused +%d (%s +%d), forwarded +%d",
				c.name, name, ok, len(conns), d("second_chance_refused"), c.reason, d(c.reason), d("second_chance_forwarded"))
			if ok == len(conns) {
				t.Errorf("%s, %s: every connection survived although be4 may not forward", c.name, name)
			}
			if d(c.reason) == 0 || d("second_chance_refused") != d(c.reason) {
				t.Errorf("%s, %s: %s +%d, second_chance_refused +%d: want the moved packets counted with this reason",
					c.name, name, c.reason, d(c.reason), d("second_chance_refused"))
			}
			if d("second_chance_forwarded") != 0 {
				t.Errorf("%s, %s: be4 forwarded %d packets", c.name, name, d("second_chance_forwarded"))
			}
		}
	}
	// The lab's own lists again: forwarding works (TestSecondChance checks the survival rate).
	setDecapLists(t, be4, []netip.Prefix{seg.Net4, seg.Net6}, sources)
	v := l.VIP("web")
	setBackends(t, f, v, v.Backends[:3])
	conns, _ := establish(t, l, v, 20)
	setBackends(t, f, v, v.Backends)
	if _, err := f.Maps.DeleteAllFlows(); err != nil {
		t.Fatal(err)
	}
	before := decapSnapshot(t, be4)
	for i, cn := range conns {
		cn.do(fmt.Sprintf("/again/%d", i))
		cn.c.Close()
	}
	if after := decapSnapshot(t, be4); after["second_chance_forwarded"].Packets == before["second_chance_forwarded"].Packets {
		t.Error("lists restored: be4 forwarded nothing")
	}
}

// setDecapLists replaces the second-chance allow-lists of a host's pinned decap.
func setDecapLists(t *testing.T, n topo.Node, peers, sources []netip.Prefix) {
	t.Helper()
	d, err := loader.OpenDecapPinned(lab.PinDir(n.NS, n.Iface))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.SetSecondChance(peers, sources); err != nil {
		t.Fatal(err)
	}
}

func decapSnapshot(t *testing.T, n topo.Node) map[string]bpfobj.LBCounter {
	t.Helper()
	c, err := lab.DecapCounters(n)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
