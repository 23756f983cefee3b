package main

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// TestL4GuardCLI: `switchyard guard` changes the running daemon's rules, which reach the guard
// maps (only what the file says); a bad rule (overlapping, host bits, rate 0) is refused naming
// the fix and the rules in the maps stay as they were; the file keeps every change.
func TestL4GuardCLI(t *testing.T) {
	l := newL4Lab(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "lb.sock")
	file := filepath.Join(dir, "lb.yaml")
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/guard-%d", os.Getpid())
	t.Cleanup(func() { _ = loader.Detach(pin) })
	conf := fmt.Sprintf("interface: %s\nsocket: %s\npin_dir: %s\nmax_vips: 8\nring_size: %d\nmax_backends: 64\nconn_table_size: 4096\nvips:\n  - {name: web, address: 198.18.100.1, port: 80, backends: [{address: 198.18.3.1}]}\n",
		l.iface, sock, pin, l4TestRing)
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	startL4Daemon(t, l, sock, "--config", file)
	s := openPinned(t, pin)
	S := []string{"--socket", sock}
	run := func(args ...string) (string, error) { return runL4CLI(t, append(args, S...)...) }
	rules := func() []maps.GuardRule {
		t.Helper()
		r, err := s.GuardRules()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if out, err := run("guard", "add", "deny", "203.0.113.0/24"); err != nil || !strings.Contains(out, "saved to") {
		t.Fatalf("guard add deny: %v %q", err, out)
	}
	if out, err := run("guard", "add", "allow", "203.0.113.8/29", "--vip", "web"); err != nil {
		t.Fatalf("guard add allow --vip: %v %q", err, out)
	}
	want := []maps.GuardRule{{Scope: 0, Prefix: netip.MustParsePrefix("203.0.113.8/29")},
		{Scope: maps.GuardScopeGlobal, Prefix: netip.MustParsePrefix("203.0.113.0/24"), Deny: true}}
	if got := rules(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rules in the maps: %v, want %v", got, want)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"guard", "add", "deny", "203.0.113.128/25"}, "overlaps 203.0.113.0/24"},
		{[]string{"guard", "add", "deny", "198.51.100.1/24"}, "host bits set: give 198.51.100.0/24"},
		{[]string{"guard", "limit", "--vip", "web", "--source-rate", "0"}, "rate 0 is not a limit"},
		{[]string{"guard", "remove", "deny", "192.0.2.0/24"}, "has no deny prefix 192.0.2.0/24"},
		{[]string{"guard", "add", "deny", "192.0.2.0/24", "--vip", "nope"}, "unknown vip"},
	} {
		if out, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%v: %v %q, want an error with %q", c.args, err, out, c.msg)
		}
		if got := rules(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after the refused %v the rules changed: %v", c.args, got)
		}
	}
	if _, err := run("guard", "limit", "--vip", "web", "--source-rate", "10", "--prefix-v4", "24", "--vip-rate", "1000"); err != nil {
		t.Fatal(err)
	}
	var g api.GuardInfo
	runL4JSON(t, &g, append([]string{"guard", "list"}, S...)...)
	if w := g.VIPs["web"]; w == nil || w.PerSource == nil || w.PerSource.Rate != 10 || w.PerSource.PrefixV4 != 24 || w.PerVIP == nil || w.PerVIP.Rate != 1000 {
		t.Fatalf("guard list: %+v", g.VIPs["web"])
	}
	if _, ok := g.Counters["deny"]; !ok {
		t.Fatalf("guard list has no counters: %+v", g.Counters)
	}
	if _, err := run("guard", "remove", "deny", "203.0.113.0/24"); err != nil {
		t.Fatal(err)
	}
	if got := rules(); len(got) != 1 || got[0].Deny {
		t.Fatalf("after remove: %v", got)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), "203.0.113.8/29") || strings.Contains(string(b), "203.0.113.0/24") || !strings.Contains(string(b), "rate: 10") {
		t.Fatalf("the file does not hold the changes:\n%s", b)
	}
}
