package main

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
)

// TestDecapCLIErrors: bad allow-lists and missing flags are refused with the problem and the fix
// named, before anything is loaded.
func TestDecapCLIErrors(t *testing.T) {
	none := t.TempDir() + "/none"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lb", "decap", "--addr", "198.18.3.1"}, "give --iface"},
		{[]string{"lb", "decap", "-i", "x", "--addr", "198.18.3.1", "--second-chance-peers", "198.18.3.0/33"}, `invalid --second-chance-peers "198.18.3.0/33": give CIDR prefixes`},
		{[]string{"lb", "decap", "-i", "x", "--addr", "198.18.3.1", "--tunnel-sources", "bogus"}, `invalid --tunnel-sources "bogus"`},
		{[]string{"lb", "decap", "-i", "x", "--addr", "198.18.3.1", "--second-chance-peers", "198.18.3.7/24", "--tunnel-sources", "198.18.255.0/24"}, "198.18.3.7/24 has host bits set: give 198.18.3.0/24"},
		{[]string{"lb", "decap", "-i", "x", "--addr", "198.18.3.1", "--second-chance-peers", "198.18.3.0/24"}, "IPv4 second-chance peers but no IPv4 tunnel sources"},
		{[]string{"lb", "decap", "-i", "x", "--addr", "198.18.3.1", "--second-chance-peers", "fd00:5e:3::/64", "--tunnel-sources", "198.18.255.0/24"}, "add the balancers' encap_source6 range"},
		{[]string{"lb", "decap", "stats"}, "lb decap stats: give --iface"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, err := runL4CLI(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: error %v (output %q), want %q", tc.args, err, out, tc.want)
			}
		})
	}
	if os.Geteuid() == 0 {
		_, err := runL4CLI(t, "lb", "decap", "stats", "--iface", "x", "--pin-dir", none)
		if err == nil || !strings.Contains(err.Error(), "no maps under "+none+"/maps-v1: attach decap first") {
			t.Errorf("stats without pins: %v", err)
		}
		if _, statErr := os.Stat(none); !os.IsNotExist(statErr) {
			t.Errorf("stats without pins created %s", none)
		}
	}
}

// TestDecapCLIStats attaches decap with `lb decap` to a veth in a namespace, then reads it with
// `lb decap stats`: the allow-lists as given, every counter (including second_chance_refused and
// its reasons), and real traffic from the peer counted; a re-run without lists turns second
// chance off, which stats reports.
func TestDecapCLIStats(t *testing.T) {
	l := newL4Lab(t)
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/decap-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll(pin) })
	var st decapStats
	inNS(t, l.lbNS, func() {
		out, err := runL4CLI(t, "lb", "decap", "--iface", l.iface, "--addr", l.addr, "--pin-dir", pin,
			"--second-chance-peers", "198.18.3.0/24,fd00:5e:3::/64", "--tunnel-sources", "198.18.255.0/24", "--tunnel-sources", "fd00:5e:ff::/96")
		if err != nil || !strings.Contains(out, "second-chance forwarding: to candidates in 198.18.3.0/24,fd00:5e:3::/64 from tunnel sources in 198.18.255.0/24,fd00:5e:ff::/96") {
			t.Errorf("attach: %v\n%s", err, out)
			return
		}
		runL4JSON(t, &st, "lb", "decap", "stats", "--iface", l.iface, "--pin-dir", pin)
	})
	if t.Failed() {
		t.FailNow()
	}
	if fmt.Sprint(st.SecondChancePeers) != "[198.18.3.0/24 fd00:5e:3::/64]" || fmt.Sprint(st.TunnelSources) != "[198.18.255.0/24 fd00:5e:ff::/96]" {
		t.Fatalf("lists %v %v", st.SecondChancePeers, st.TunnelSources)
	}
	for _, n := range []string{"decap_ipip", "pass", "second_chance_forwarded", "second_chance_refused", "second_chance_refused_source", "second_chance_refused_candidate"} {
		if _, ok := st.Counters[n]; !ok {
			t.Fatalf("counter %s missing from %v", n, st.Counters)
		}
	}
	// Traffic from the router namespace (ARP, then UDP: not tunnel packets) is counted "pass".
	var now decapStats
	testutil.Eventually(t, 20*time.Second, func() bool {
		inNS(t, l.rtNS, func() {
			if c, err := net.Dial("udp", net.JoinHostPort(l.addr, "9")); err == nil {
				c.Write([]byte("x"))
				c.Close()
			}
		})
		now = decapStats{}
		inNS(t, l.lbNS, func() { runL4JSON(t, &now, "lb", "decap", "stats", "--iface", l.iface, "--pin-dir", pin) })
		return now.Counters["pass"].Packets > st.Counters["pass"].Packets
	}, "pass counter did not move: %v", func() any { return now.Counters })
	inNS(t, l.lbNS, func() {
		if out, err := runL4CLI(t, "lb", "decap", "--iface", l.iface, "--addr", l.addr, "--pin-dir", pin); err != nil || !strings.Contains(out, "second-chance forwarding: off") {
			t.Errorf("re-attach without lists: %v\n%s", err, out)
		}
		out, err := runL4CLI(t, "lb", "decap", "stats", "--iface", l.iface, "--pin-dir", pin)
		if err != nil || !strings.Contains(out, "second_chance_refused ") || !strings.Contains(out, "second-chance forwarding: off") {
			t.Errorf("stats after re-attach: %v\n%s", err, out)
		}
		if out, err := runL4CLI(t, "lb", "decap", "--iface", l.iface, "--pin-dir", pin, "--detach"); err != nil {
			t.Errorf("detach: %v\n%s", err, out)
		}
	})
}
