package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"github.com/urfave/cli/v2"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/maps"
)

// runL4CLI runs a switchyard command through the app with captured output.
func runL4CLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	app.ExitErrHandler = func(*cli.Context, error) {}
	err := app.RunContext(context.Background(), append([]string{"switchyard"}, args...))
	return out.String(), err
}

// runL4JSON runs a command with --json and decodes its output.
func runL4JSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, err := runL4CLI(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("%v: decode %q: %v", args, out, err)
	}
}

// TestL4HelpEveryCommand checks that every L4 command has --help with examples.
func TestL4HelpEveryCommand(t *testing.T) {
	var walk func(prefix []string, cs []*cli.Command)
	n := 0
	walk = func(prefix []string, cs []*cli.Command) {
		for _, c := range cs {
			if c.Name == "help" {
				continue // urfave/cli's own
			}
			path := append(append([]string{}, prefix...), c.Name)
			if len(prefix) == 0 && c.Name != "lb" && c.Name != "vip" && c.Name != "backend" && c.Name != "guard" {
				continue
			}
			n++
			out, err := runL4CLI(t, append(path, "--help")...)
			if err != nil {
				t.Errorf("%v --help: %v", path, err)
			}
			if !strings.Contains(out, "Examples:") || !strings.Contains(out, "switchyard "+path[0]) {
				t.Errorf("%v --help has no examples:\n%s", path, out)
			}
			walk(path, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	if n < 20 {
		t.Errorf("only %d L4 commands found", n)
	}
}

// TestL4CLIErrors checks the errors that need no daemon: each names the problem and the fix.
func TestL4CLIErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.sock")
	bad := filepath.Join(dir, "bad.yaml")
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(bad, []byte("interface: eth0\nvips:\n  - address: 198.18.100.1\n    port: 80\n    backends:\n      - address: 198.18.3.999\n"), 0o600)
	os.WriteFile(good, []byte("interface: eth0\nvips:\n  - {name: web, address: 198.18.100.1, port: 80, backends: [{address: 198.18.3.1}]}\n"), 0o600)
	// A stale socket file: nothing listens.
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"vip", "list", "--socket", missing}, "daemon not running: no control socket at " + missing},
		{[]string{"backend", "list", "--socket", stale}, "daemon not running: nothing listens"},
		{[]string{"lb", "stats", "--socket", missing}, "start it with `switchyard lb run"},
		{[]string{"backend", "add", "web", "--socket", missing}, "expected 2 argument(s), got 1"},
		{[]string{"backend", "weight", "web", "198.18.3.1", "0", "--socket", missing}, "invalid weight \"0\""},
		{[]string{"backend", "add", "web", "198.18.3.1", "--weight", "0", "--socket", missing}, "invalid --weight 0"},
		{[]string{"backend", "drain", "web", "198.18.3.1", "--bogus"}, "unknown flag --bogus"},
		{[]string{"vip", "add", "web", "198.18.100:80", "--socket", missing}, "invalid address \"198.18.100:80\""},
		{[]string{"lb", "flow", "tcp", "1.2.3.4:5", "--socket", missing}, "expected 3 argument(s)"},
		{[]string{"lb", "run"}, "give --config FILE or at least --iface"},
		{[]string{"lb", "run", "--config", bad}, "line 6: vips[0].backends[0].address: invalid address \"198.18.3.999\""},
		{[]string{"lb", "config", "check", bad}, "line 6"},
		{[]string{"lb", "run", "--iface", "eth0", "--xdp-mode", "turbo"}, "unknown mode \"turbo\""},
	}
	for _, tc := range cases {
		// Named without the temporary directory, so that `-run` can pick one case.
		t.Run(strings.ReplaceAll(strings.Join(tc.args, " "), dir+"/", ""), func(t *testing.T) {
			out, err := runL4CLI(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v: error %v (output %q), want %q", tc.args, err, out, tc.want)
			}
		})
	}
	out, err := runL4CLI(t, "lb", "config", "check", good)
	if err != nil || !strings.Contains(out, "valid: interface eth0, 1 VIPs, 1 backends") {
		t.Errorf("config check: %v %q", err, out)
	}
	if os.Geteuid() == 0 {
		// Root: the interface is checked before anything is loaded.
		_, err := runL4CLI(t, "lb", "run", "--iface", "sy-nonexistent", "--socket", filepath.Join(dir, "x.sock"), "--pin-dir", "/sys/fs/bpf/switchyard/test/none")
		if err == nil || !strings.Contains(err.Error(), "find interface \"sy-nonexistent\"") {
			t.Errorf("missing interface: %v", err)
		}
		// A store without prefix, and VIPs in the file of a daemon with a store, are refused
		// before anything is loaded.
		_, err = runL4CLI(t, "lb", "run", "--iface", "lo", "--store", "etcd://127.0.0.1:2379")
		if err == nil || !strings.Contains(err.Error(), "no prefix") {
			t.Errorf("store without prefix: %v", err)
		}
		_, err = runL4CLI(t, "lb", "run", "--config", good, "--store", "etcd://127.0.0.1:2379/sy")
		if err == nil || !strings.Contains(err.Error(), "lb store seed") {
			t.Errorf("file VIPs with a store: %v", err)
		}
	}
}

// TestL4HelperProcess is not a test: the daemon tests run the binary's main through it in a
// network namespace (nsenter), as the lab runs `switchyard lb run`.
func TestL4HelperProcess(t *testing.T) {
	args := os.Getenv("SWITCHYARD_L4_HELPER_ARGS")
	if args == "" {
		t.Skip("helper process for the daemon tests; runs only when they start it")
	}
	app := newApp()
	if err := app.Run(append([]string{"switchyard"}, strings.Split(args, "\x1f")...)); err != nil {
		fmt.Fprintln(os.Stderr, "switchyard:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// l4Lab is the smallest lab/topo lab (one client, balancer and backend namespace behind the
// router's bridges): the daemon runs in the balancer's namespace on its eth0 (addr, default
// route via gw, the router's br-lb), and the router side of that veth (port) can run XDP_PASS
// so that XDP_TX frames are received. Namespaces are named under /run/netns, so nsenter can
// enter them, and removed with the lab's prefix when the test ends.
type l4Lab struct {
	lbNS, rtNS  string // the balancer's and the router's namespace
	iface, port string // the balancer's interface and its peer in the router namespace
	addr, gw    string // the balancer's address and its gateway (the router on br-lb)
	hLB         *netlink.Handle
}

func newL4Lab(t *testing.T) *l4Lab {
	t.Helper()
	testutil.RequireRoot(t)
	testutil.RequireKernel(t, testutil.Netns)
	testutil.RequireKernel(t, testutil.XDP)
	tp, err := topo.Plan(topo.Spec{Prefix: labPrefix(t, "l"), Clients: 1, Balancers: 1, Backends: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.Build(); err != nil {
		t.Fatalf("build lab: %v", err)
	}
	n := tp.ByRole(topo.Balancer)[0]
	l := &l4Lab{lbNS: n.NS, rtNS: tp.RouterNS, iface: n.Iface, port: n.Port,
		addr: n.Addr4.String(), gw: tp.Segment(n.Segment).Router4.String()}
	ns, err := netns.GetFromName(l.lbNS)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	if l.hLB, err = netlink.NewHandleAt(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.hLB.Close)
	return l
}

// inNS runs f on a thread inside the named namespace (sockets f creates live there).
func inNS(t *testing.T, ns string, f func()) {
	t.Helper()
	testutil.DoNamed(t, ns, func() error { f(); return nil })
}

// l4Daemon is a `switchyard lb run` process inside the lab's balancer namespace.
type l4Daemon struct {
	cmd  *exec.Cmd
	log  *l4Log
	done chan error
}

// l4Log is the daemon's output, written by exec's copier while the test reads it.
type l4Log struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *l4Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *l4Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func startL4Daemon(t *testing.T, l *l4Lab, sock string, args ...string) *l4Daemon {
	t.Helper()
	cmd := exec.Command("nsenter", "--net="+namednetns.Path(l.lbNS), "--", os.Args[0], "-test.run=^TestL4HelperProcess$")
	cmd.Env = append(os.Environ(), "SWITCHYARD_L4_HELPER_ARGS="+strings.Join(append([]string{"lb", "run"}, args...), "\x1f"))
	d := &l4Daemon{cmd: cmd, log: &l4Log{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = d.log, d.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- cmd.Wait() }()
	t.Cleanup(func() { d.stop(t) })
	testutil.Eventually(t, 15*time.Second, func() bool {
		var st api.Status
		if err := api.NewClient(sock).Call(context.Background(), api.OpStatus, api.Empty{}, &st); err == nil {
			return true
		}
		select {
		case err := <-d.done:
			d.done <- err
			t.Fatalf("daemon exited: %v\n%s", err, d.log)
		default:
		}
		return false
	}, "daemon not ready:\n%s", d.log)
	return d
}

// stop sends SIGTERM and waits; idempotent.
func (d *l4Daemon) stop(t *testing.T) {
	if d.cmd.ProcessState != nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-d.done:
		d.done <- err
		if err != nil {
			t.Errorf("daemon exit: %v\n%s", err, d.log)
		}
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		t.Errorf("daemon did not stop on SIGTERM:\n%s", d.log)
	}
}

const l4TestRing = 251

// openPinned opens the daemon's pinned maps from the test (same sizes as the config below).
func openPinned(t *testing.T, pin string) *maps.Set {
	t.Helper()
	f, err := loader.LoadForwarder(loader.Options{PinDir: pin, MaxVIPs: 8, RingSize: l4TestRing, MaxBackends: 64, ConnTableSize: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s, err := maps.New(&f.Objs.LBMaps, l4TestRing)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func backendIDs(t *testing.T, s *maps.Set) map[string]uint32 {
	t.Helper()
	bs, err := s.Backends()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint32{}
	for _, b := range bs {
		out[b.Addr.String()] = b.ID
	}
	return out
}

func ringHas(t *testing.T, s *maps.Set, vipID, id uint32) int {
	t.Helper()
	r, err := s.Ring(vipID)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range r {
		if x == id {
			n++
		}
	}
	return n
}

func findBackendInfo(bs []api.BackendInfo, vip, addr string) api.BackendInfo {
	for _, b := range bs {
		if b.VIP == vip && b.Address == addr {
			return b
		}
	}
	return api.BackendInfo{}
}

// TestL4DaemonLifecycle runs the real daemon in a namespace on a veth with the real XDP program:
// add, drain and remove through the CLI change the real maps; health checks move a backend out;
// a bad reload changes nothing; a restart adopts the pinned link (same id) and maps (same ids,
// same ring, nothing rewritten); `lb detach` removes everything.
func TestL4DaemonLifecycle(t *testing.T) {
	l := newL4Lab(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "lb.sock")
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/lifecycle-%d", os.Getpid())
	t.Cleanup(func() { _ = loader.Detach(pin) })
	cfgPath := filepath.Join(dir, "lb.yaml")
	cfgText := fmt.Sprintf(`interface: %s
xdp_mode: native
pin_dir: %s
socket: %s
ring_size: %d
max_vips: 8
max_backends: 64
conn_table_size: 4096
drain_timeout: 1h
vips:
  - name: web
    address: 198.18.100.1
    port: 80
    backends:
      - {address: 198.18.3.1}
      - {address: 198.18.3.2}
`, l.iface, pin, sock, l4TestRing)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	// The router side receives XDP_TX frames only with an XDP program attached.
	inNS(t, l.rtNS, func() {
		lk, err := loader.AttachPass(l.port, loader.Native, "")
		if err != nil {
			t.Error(err)
			return
		}
		t.Cleanup(func() { lk.Close() })
	})
	d := startL4Daemon(t, l, sock, "--config", cfgPath)
	S := []string{"--socket", sock}
	var st api.Status
	runL4JSON(t, &st, append([]string{"lb", "status"}, S...)...)
	if st.Adopted || st.LinkID == 0 || st.Gateway != l.gw || st.NextHopMAC == "" {
		t.Fatalf("status: %+v\n%s", st, d.log)
	}
	s := openPinned(t, pin)
	ids := backendIDs(t, s)
	vips, _ := s.VIPs()
	if len(vips) != 1 || len(ids) != 2 {
		t.Fatalf("maps after start: vips %+v backends %v", vips, ids)
	}
	web := vips[0].ID
	if ringHas(t, s, web, ids["198.18.3.1"]) == 0 || ringHas(t, s, web, ids["198.18.3.2"]) == 0 {
		t.Fatal("ring misses a backend")
	}
	mc, _ := s.Config()
	if mc.NextHopMAC.String() != st.NextHopMAC {
		t.Fatalf("map config next hop %s, status %s", mc.NextHopMAC, st.NextHopMAC)
	}

	// Add (flags after the arguments), drain, and an established flow on the drained backend.
	if out, err := runL4CLI(t, append([]string{"backend", "add", "web", "198.18.3.3", "--weight", "2"}, S...)...); err != nil || !strings.Contains(out, "saved to "+cfgPath) {
		t.Fatalf("backend add: %v %s", err, out)
	}
	ids = backendIDs(t, s)
	if ids["198.18.3.3"] == 0 || ringHas(t, s, web, ids["198.18.3.3"]) < l4TestRing/3 {
		t.Fatalf("added backend not in maps with weight 2: %v", ids)
	}
	flow := maps.Flow{Src: netipAP("198.18.0.5:40000"), Dst: netipAP("198.18.100.1:80"), Proto: maps.TCP}
	if err := s.PutFlow(flow, ids["198.18.3.1"], web); err != nil {
		t.Fatal(err)
	}
	if _, err := runL4CLI(t, append([]string{"backend", "drain", "web", "198.18.3.1"}, S...)...); err != nil {
		t.Fatal(err)
	}
	if n := ringHas(t, s, web, ids["198.18.3.1"]); n != 0 {
		t.Fatalf("drained backend still holds %d ring slots", n)
	}
	if backendIDs(t, s)["198.18.3.1"] != ids["198.18.3.1"] {
		t.Fatal("drain emptied the backend slot: established flows would re-hash")
	}
	var bl []api.BackendInfo
	runL4JSON(t, &bl, append([]string{"backend", "list", "web"}, S...)...)
	b1 := findBackendInfo(bl, "web", "198.18.3.1")
	if b1.State != api.StateDraining || b1.ActiveFlows != 1 || b1.InRing || b1.DrainLeft <= 0 {
		t.Fatalf("drained backend in list: %+v", b1)
	}
	var fi api.FlowInfo
	runL4JSON(t, &fi, append([]string{"lb", "flow", "tcp", "198.18.0.5:40000", "198.18.100.1:80"}, S...)...)
	if fi.Reason != "connection table" || fi.Backend != "198.18.3.1" || fi.RingBackend == "198.18.3.1" || fi.Note == "" {
		t.Fatalf("flow on a drained backend: %+v", fi)
	}
	out, _ := runL4CLI(t, append([]string{"backend", "list"}, S...)...)
	if !strings.Contains(out, "draining") || !strings.Contains(out, "ACTIVE FLOWS") {
		t.Fatalf("backend list table:\n%s", out)
	}
	// Errors from the daemon name the problem and the fix.
	for args, want := range map[string]string{
		"backend drain web 198.18.3.9":           "unknown backend 198.18.3.9 in vip web",
		"backend drain nope 198.18.3.1":          "unknown vip \"nope\"",
		"backend add web 198.18.3.1":             "already in vip web",
		"backend add web 198.18.3":               "invalid backend address",
		"vip add web 198.18.100.1:80":            "name \"web\" already used",
		"lb flow tcp 198.18.0.5:1 198.18.9.9:80": "no VIP matches",
		"lb config save":                         "", // succeeds
	} {
		_, err := runL4CLI(t, append(strings.Fields(args), S...)...)
		if want == "" {
			if err != nil {
				t.Errorf("%s: %v", args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", args, err, want)
		}
	}

	// An IPv6 VIP with an IPv6 backend, and the stats of both VIPs.
	if out, err := runL4CLI(t, append([]string{"vip", "add", "web6", "[fd00:5e:100::1]:443", "--backend", "fd00:5e:3::1", "--hash", "source-only"}, S...)...); err != nil {
		t.Fatalf("vip add v6: %v %s", err, out)
	}
	vips, _ = s.VIPs()
	found := false
	for _, v := range vips {
		if v.Key.Addr.String() == "fd00:5e:100::1" && v.Key.Port == 443 && v.Flags == maps.HashSrcOnly {
			found = true
		}
	}
	if !found || backendIDs(t, s)["fd00:5e:3::1"] == 0 {
		t.Fatalf("v6 vip not in maps: %+v", vips)
	}
	var stats api.Stats
	runL4JSON(t, &stats, append([]string{"lb", "stats"}, S...)...)
	if len(stats.VIPs) != 2 || len(stats.Backends) != 4 || len(stats.Counters) != len(maps.CounterNames)+len(maps.SecondChanceCounterNames)+len(maps.QUICCounterNames) || stats.VIPs[0].ActiveFlows != 1 {
		t.Fatalf("stats: %+v", stats)
	}
	if _, err := runL4CLI(t, append([]string{"vip", "remove", "[fd00:5e:100::1]:443/tcp"}, S...)...); err != nil {
		t.Fatal(err)
	}
	if backendIDs(t, s)["fd00:5e:3::1"] != 0 {
		t.Fatal("removed vip's backend still has a slot")
	}

	// Health: a VIP whose backend is a listener inside the namespace; closing it takes the
	// backend out (all_backends_down keep: it stays in the ring, marked unhealthy-kept).
	var hl net.Listener
	inNS(t, l.lbNS, func() {
		lo, _ := netlink.LinkByName("lo")
		a, _ := netlink.ParseAddr("198.18.3.10/32")
		if err := netlink.AddrAdd(lo, a); err != nil {
			t.Error(err)
			return
		}
		var err error
		if hl, err = net.Listen("tcp", "198.18.3.10:8080"); err != nil {
			t.Error(err)
		}
	})
	if hl == nil {
		t.FailNow()
	}
	go func() {
		for {
			c, err := hl.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if out, err := runL4CLI(t, append([]string{"vip", "add", "api", "198.18.100.3:8080", "--backend", "198.18.3.10", "--health", "tcp",
		"--health-mode", "direct", "--health-interval", "100ms", "--health-timeout", "50ms", "--health-rise", "1", "--health-fall", "2"}, S...)...); err != nil {
		t.Fatalf("vip add: %v %s", err, out)
	}
	waitHealth := func(healthy bool) {
		t.Helper()
		var hs []api.HealthInfo
		testutil.Eventually(t, 5*time.Second, func() bool {
			hs = nil
			runL4JSON(t, &hs, append([]string{"lb", "health"}, S...)...)
			return len(hs) == 1 && hs[0].Checked && hs[0].Healthy == healthy && hs[0].Mode == "direct"
		}, "health never became %v: %+v\n%s", healthy, func() any { return hs }, d.log)
	}
	waitHealth(true)
	hl.Close()
	waitHealth(false)
	runL4JSON(t, &bl, append([]string{"backend", "list", "api"}, S...)...)
	if len(bl) != 1 || bl[0].State != api.StateAllDownKept || bl[0].Health != "unhealthy" || !bl[0].InRing {
		t.Fatalf("unhealthy only backend: %+v", bl)
	}

	// Remove: the slot empties. A bad reload changes nothing and says line and field.
	if _, err := runL4CLI(t, append([]string{"backend", "remove", "web", "198.18.3.1"}, S...)...); err != nil {
		t.Fatal(err)
	}
	if _, ok := backendIDs(t, s)["198.18.3.1"]; ok {
		t.Fatal("removed backend still has a slot")
	}
	saved, _ := os.ReadFile(cfgPath)
	if !strings.Contains(string(saved), "198.18.3.3") || strings.Contains(string(saved), "198.18.3.1\n") || !strings.Contains(string(saved), "name: api") {
		t.Fatalf("CLI changes not persisted:\n%s", saved)
	}
	good := saved
	os.WriteFile(cfgPath, []byte(strings.Replace(string(saved), "198.18.3.3", "198.18.3.300", 1)), 0o600)
	_, err := runL4CLI(t, append([]string{"lb", "config", "reload"}, S...)...)
	if err == nil || !strings.Contains(err.Error(), "line ") || !strings.Contains(err.Error(), "backends[") {
		t.Fatalf("bad reload: %v", err)
	}
	if backendIDs(t, s)["198.18.3.3"] == 0 {
		t.Fatal("bad reload changed the maps")
	}
	// SIGHUP reload of a good file with one more backend.
	os.WriteFile(cfgPath, []byte(strings.Replace(string(good), "      - address: 198.18.3.3\n", "      - address: 198.18.3.4\n        weight: 1\n      - address: 198.18.3.3\n", 1)), 0o600)
	_ = d.cmd.Process.Signal(syscall.SIGHUP)
	// The reload is complete once the new backend is in the ring (its slot is written first).
	inRing := func(addr string) bool {
		id := backendIDs(t, s)[addr]
		ring, _ := s.Ring(web)
		for _, x := range ring {
			if id != 0 && x == id {
				return true
			}
		}
		return false
	}
	testutil.Eventually(t, 5*time.Second, func() bool { return inRing("198.18.3.4") }, "SIGHUP did not reload:\n%s", d.log)

	// Restart: stop (nothing detached), check the program stays, start again and adopt.
	before := backendIDs(t, s)
	ringBefore, _ := s.Ring(web)
	d.stop(t)
	pl, err := link.LoadPinnedLink(loader.LinkPath(pin), nil)
	if err != nil {
		t.Fatalf("link pin gone after stop: %v", err)
	}
	info, err := pl.Info()
	pl.Close()
	if err != nil || uint32(info.ID) != st.LinkID {
		t.Fatalf("pinned link %v id %d, was %d", err, info.ID, st.LinkID)
	}
	if ln, err := l.hLB.LinkByName(l.iface); err != nil || ln.Attrs().Xdp == nil || !ln.Attrs().Xdp.Attached {
		t.Fatalf("XDP not attached while the daemon is down: %v %+v", err, ln.Attrs().Xdp)
	}
	d2 := startL4Daemon(t, l, sock, "--config", cfgPath)
	var st2 api.Status
	runL4JSON(t, &st2, append([]string{"lb", "status"}, S...)...)
	if !st2.Adopted || st2.LinkID != st.LinkID {
		t.Fatalf("restart: adopted %v link %d, was %d", st2.Adopted, st2.LinkID, st.LinkID)
	}
	if !strings.Contains(d2.log.String(), "slots_written=0") {
		t.Errorf("restart rewrote ring slots:\n%s", d2.log)
	}
	after := backendIDs(t, s)
	for a, id := range before {
		if after[a] != id {
			t.Fatalf("backend %s id %d -> %d across restart", a, id, after[a])
		}
	}
	ringAfter, _ := s.Ring(web)
	for i := range ringBefore {
		if ringBefore[i] != ringAfter[i] {
			t.Fatalf("ring slot %d changed across restart", i)
		}
	}
	if e, ok, _ := s.LookupFlow(flow); !ok || e.Backend != ids["198.18.3.1"] {
		t.Fatalf("connection-table entry lost across restart: %+v %v", e, ok)
	}

	// A second daemon for the same socket fails before touching the maps or the program.
	dup := exec.Command("nsenter", "--net="+namednetns.Path(l.lbNS), "--", os.Args[0], "-test.run=^TestL4HelperProcess$")
	dup.Env = append(os.Environ(), "SWITCHYARD_L4_HELPER_ARGS="+strings.Join([]string{"lb", "run", "--config", cfgPath}, "\x1f"))
	if out, err := dup.CombinedOutput(); err == nil || !strings.Contains(string(out), "another daemon answers") {
		t.Fatalf("second daemon: %v\n%s", err, out)
	}
	var st3 api.Status
	runL4JSON(t, &st3, append([]string{"lb", "status"}, S...)...)
	if st3.ProgramID != st2.ProgramID || st3.LinkID != st.LinkID {
		t.Fatalf("second daemon changed the program: %d -> %d", st2.ProgramID, st3.ProgramID)
	}

	// Shell completion lists the VIPs; detach refuses while a daemon runs.
	if out, _ := runL4CLI(t, "backend", "drain", "--socket", sock, "--generate-bash-completion"); !strings.Contains(out, "web\n") {
		t.Errorf("completion: %q", out)
	}
	if _, err := runL4CLI(t, "lb", "detach", "--iface", l.iface, "--pin-dir", pin, "--socket", sock); err == nil || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("detach with a running daemon: %v", err)
	}

	// Detach removes link and pins; XDP is gone from the interface.
	d2.stop(t)
	if out, err := runL4CLI(t, "lb", "detach", "--iface", l.iface, "--pin-dir", pin); err != nil {
		t.Fatalf("detach: %v %s", err, out)
	}
	if _, err := os.Stat(pin); !os.IsNotExist(err) {
		t.Fatalf("pin dir still there: %v", err)
	}
	if ln, _ := l.hLB.LinkByName(l.iface); ln != nil && ln.Attrs().Xdp != nil && ln.Attrs().Xdp.Attached {
		t.Fatal("XDP still attached after detach")
	}
}

func netipAP(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// TestL4DrainTimeoutAndMetrics starts a daemon whose flags override its file, builds its state
// through the CLI, and checks that a drain past drain_timeout cuts the
// backend's remaining flows; the metrics endpoint shows the states.
func TestL4DrainTimeoutAndMetrics(t *testing.T) {
	l := newL4Lab(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "lb.sock")
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/drain-%d", os.Getpid())
	t.Cleanup(func() { _ = loader.Detach(pin) })
	// The file carries the map sizes of openPinned; the flags override interface, socket, pins.
	cfgPath := filepath.Join(dir, "lb.yaml")
	os.WriteFile(cfgPath, []byte(fmt.Sprintf("interface: other0\nring_size: %d\nmax_vips: 8\nmax_backends: 64\nconn_table_size: 4096\ndrain_timeout: 1s\nvips: []\n", l4TestRing)), 0o600)
	d := startL4Daemon(t, l, sock, "--config", cfgPath, "--iface", l.iface, "--socket", sock, "--pin-dir", pin, "--xdp-mode", "generic", "--metrics", "127.0.0.1:9100")
	S := []string{"--socket", sock}
	if out, err := runL4CLI(t, append([]string{"vip", "add", "web", "198.18.100.1:80", "-b", "198.18.3.1", "-b", "198.18.3.2"}, S...)...); err != nil {
		t.Fatalf("vip add: %v %s", err, out)
	}
	s := openPinned(t, pin)
	ids := backendIDs(t, s)
	vips, _ := s.VIPs()
	flow := maps.Flow{Src: netipAP("198.18.0.5:40001"), Dst: netipAP("198.18.100.1:80"), Proto: maps.TCP}
	if err := s.PutFlow(flow, ids["198.18.3.1"], vips[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := runL4CLI(t, append([]string{"backend", "drain", "web", "198.18.3.1"}, S...)...); err != nil {
		t.Fatal(err)
	}
	var bl []api.BackendInfo
	runL4JSON(t, &bl, append([]string{"backend", "list", "web"}, S...)...)
	if b := findBackendInfo(bl, "web", "198.18.3.1"); b.State != api.StateDraining || b.ActiveFlows != 1 {
		t.Fatalf("draining backend: %+v", b)
	}
	testutil.Eventually(t, 5*time.Second, func() bool {
		_, ok, _ := s.LookupFlow(flow)
		return !ok
	}, "flow of the drained backend not cut after drain_timeout:\n%s", d.log)
	runL4JSON(t, &bl, append([]string{"backend", "list", "web"}, S...)...)
	if b := findBackendInfo(bl, "web", "198.18.3.1"); b.State != api.StateDrained || b.ActiveFlows != 0 {
		t.Fatalf("drained backend after timeout: %+v", b)
	}
	// The metrics endpoint lives in the namespace: scrape it from a thread there.
	var body string
	inNS(t, l.lbNS, func() {
		c, err := net.Dial("tcp", "127.0.0.1:9100")
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		fmt.Fprintf(c, "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var buf bytes.Buffer
		buf.ReadFrom(c)
		body = buf.String()
	})
	for _, want := range []string{
		`switchyard_l4_backend_state{backend="198.18.3.1",state="drained",vip="web"} 1`,
		`switchyard_l4_backend_state{backend="198.18.3.2",state="active",vip="web"} 1`,
		`switchyard_l4_drain_timeouts_total 1`,
		`switchyard_l4_next_hop_resolved 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// Save to another file writes the running state there; later changes still go to --config.
	saved := filepath.Join(dir, "saved.yaml")
	if out, err := runL4CLI(t, append([]string{"lb", "config", "save", "--path", saved}, S...)...); err != nil {
		t.Fatalf("save: %v %s", err, out)
	}
	b, _ := os.ReadFile(saved)
	if !strings.Contains(string(b), "drained: true") || !strings.Contains(string(b), "interface: "+l.iface) {
		t.Fatalf("saved file:\n%s", b)
	}
	if out, err := runL4CLI(t, append([]string{"backend", "remove", "web", "198.18.3.1"}, S...)...); err != nil || !strings.Contains(out, "saved to "+cfgPath) {
		t.Fatalf("remove after save: %v %s", err, out)
	}
}

// TestL4NoConfigFile starts a daemon from flags alone (default map sizes): CLI changes are not
// persisted until `lb config save --path`, after which the saved file takes every change and
// a reload reads it.
func TestL4NoConfigFile(t *testing.T) {
	l := newL4Lab(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "lb.sock")
	pin := fmt.Sprintf("/sys/fs/bpf/switchyard/test/noconfig-%d", os.Getpid())
	t.Cleanup(func() { _ = loader.Detach(pin) })
	startL4Daemon(t, l, sock, "--iface", l.iface, "--socket", sock, "--pin-dir", pin)
	S := []string{"--socket", sock}
	out, err := runL4CLI(t, append([]string{"vip", "add", "web", "198.18.100.1:80", "-b", "198.18.3.1"}, S...)...)
	if err != nil || strings.Contains(out, "saved to") {
		t.Fatalf("vip add without a file: %v %q", err, out)
	}
	if _, err := runL4CLI(t, append([]string{"lb", "config", "reload"}, S...)...); err == nil || !strings.Contains(err.Error(), "without --config") {
		t.Fatalf("reload without a file: %v", err)
	}
	saved := filepath.Join(dir, "lb.yaml")
	if _, err := runL4CLI(t, append([]string{"lb", "config", "save", "--path", saved}, S...)...); err != nil {
		t.Fatal(err)
	}
	if out, err := runL4CLI(t, append([]string{"backend", "add", "web", "198.18.3.2"}, S...)...); err != nil || !strings.Contains(out, "saved to "+saved) {
		t.Fatalf("change after save: %v %q", err, out)
	}
	b, _ := os.ReadFile(saved)
	if !strings.Contains(string(b), "198.18.3.2") || !strings.Contains(string(b), "interface: "+l.iface) {
		t.Fatalf("saved file:\n%s", b)
	}
	if _, err := runL4CLI(t, append([]string{"lb", "config", "reload"}, S...)...); err != nil {
		t.Fatalf("reload of the saved file: %v", err)
	}
}

// TestL4BackendAddressCheckedFirst: a bad backend address is reported as such before the CLI
// looks for a daemon.
func TestL4BackendAddressCheckedFirst(t *testing.T) {
	for _, cmd := range [][]string{{"backend", "add", "web", "1.2.3.999"}, {"backend", "drain", "web", "nope"}} {
		_, err := runL4CLI(t, append(cmd, "--socket", "/nonexistent/switchyard.sock")...)
		if err == nil || !strings.Contains(err.Error(), "invalid backend address") {
			t.Errorf("%v: %v, want an invalid-address error", cmd, err)
		}
	}
}
