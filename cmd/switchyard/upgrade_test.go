package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/switchyard/switchyard/internal/testutil"
)

// TestUpgrade builds the binary once for every upgrade test; each runs its own copy, as
// installed, so that it can replace it.
func TestUpgrade(t *testing.T) {
	built := buildLabBinary(t, "switchyard")
	t.Run("DropsNoRequest", func(t *testing.T) { testUpgradeDropsNoRequest(t, built) })
	t.Run("L7Engines", func(t *testing.T) { testUpgradeL7Engines(t, built) })
	t.Run("FailureKeepsOldServing", func(t *testing.T) { testUpgradeFailureKeepsOldServing(t, built) })
	t.Run("ControlSocket", func(t *testing.T) { testUpgradeControlSocket(t, built) })
	t.Run("HTTP3KeepsConnections", func(t *testing.T) { testUpgradeHTTP3(t, built) })
}

// copyBinary installs a copy of the built binary in dir.
func copyBinary(t *testing.T, built, dir string) string {
	t.Helper()
	b, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "switchyard")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// A stop process started by a test from the binary at bin, logging to a file (a pipe would keep
// the test waiting for the successor, which inherits it).
type stopProc struct {
	cmd  *exec.Cmd
	log  string
	ctl  string
	done chan struct{} // closed when it exits, with err set
	err  error
}

func startStopProc(t *testing.T, bin, dir, stop string, args ...string) *stopProc {
	t.Helper()
	p := &stopProc{log: filepath.Join(dir, stop+".log"), ctl: filepath.Join(dir, "run", stop+".sock"), done: make(chan struct{})}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.cmd = exec.Command(bin, append([]string{stop, "run", "--control", p.ctl}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		defer stopUnder(dir) // successors, also those a failed test did not learn the id of
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			p.cmd.Process.Kill()
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("%s log:\n%s", stop, b)
		}
	})
	return p
}

// waitLog waits until the process's log matches re and returns the first submatch.
func (p *stopProc) waitLog(t *testing.T, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m [][]byte
	testutil.Eventually(t, 30*time.Second, func() bool {
		exited := false
		select {
		case <-p.done:
			exited = true // read the log once more: the line may be its last
		default:
		}
		b, _ := os.ReadFile(p.log)
		if m = rx.FindSubmatch(b); m == nil && exited {
			t.Fatalf("process exited (%v) before logging %q:\n%s", p.err, re, b)
		}
		return m != nil
	}, "no %q in the log:\n%s", re, func() any { b, _ := os.ReadFile(p.log); return b })
	return string(m[len(m)-1])
}

var upgradedRe = regexp.MustCompile(`upgraded: pid (\d+) serves; pid (\d+) finishes`)

// upgradeStop runs `switchyard STOP upgrade` and returns the new process's id; the new process
// is stopped when the test ends.
func upgradeStop(t *testing.T, bin, stop, ctl string) (int, string, error) {
	out, err := exec.Command(bin, stop, "upgrade", "--control", ctl).CombinedOutput()
	m := upgradedRe.FindSubmatch(out)
	if err != nil || m == nil {
		return 0, string(out), fmt.Errorf("%s upgrade: %v: %s", stop, err, out)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	t.Cleanup(func() { stopPID(pid) })
	return pid, string(out), nil
}

// stopPID ends a process that is not the test's child (an upgrade's successor).
func stopPID(pid int) {
	syscall.Kill(pid, syscall.SIGTERM)
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if syscall.Kill(pid, 0) != nil {
			return
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// stopUnder ends every process whose command line names dir (the test's own directory).
func stopUnder(dir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && strings.Contains(string(b), dir+"/") {
			stopPID(pid)
		}
	}
}

// replaceBinary puts a fresh copy of bin at its path (a new file, as a package upgrade does), so
// that a successor provably runs the file now installed.
func replaceBinary(t *testing.T, bin string) {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	tmp := bin + ".new"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
}

// load sends n requests at rate per second (each in its own goroutine, so a slow one does not
// slow the rest) and counts the ones that fail.
type load struct {
	name       string
	sent, fail atomic.Int64
	mu         sync.Mutex
	errs       []string
}

func (l *load) run(n, rate int, do func(i int) error) {
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for i := 0; i < n; i++ {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := do(i)
			l.sent.Add(1)
			if err != nil {
				l.fail.Add(1)
				l.mu.Lock()
				if len(l.errs) < 5 {
					l.errs = append(l.errs, fmt.Sprintf("request %d at %s: %v", i, time.Now().Format("15:04:05.000"), err))
				}
				l.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

func httpGet(c *http.Client, url, want string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(string(b), want) {
		return fmt.Errorf("status %d body %q", resp.StatusCode, b)
	}
	return nil
}

func dnsAsk(network, addr string) error {
	c := &mdns.Client{Net: network, Timeout: 3 * time.Second}
	m := new(mdns.Msg)
	m.SetQuestion("www.example.com.", mdns.TypeA)
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return err
	}
	if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
		return fmt.Errorf("answer %s", r)
	}
	return nil
}

// upgradeOrigin is the application behind the L7 and edge stops: cacheable and uncacheable
// objects, so the edge both answers from memory and goes to the origin.
func upgradeOrigin(t *testing.T) string { return upgradeOriginOn(t, "127.0.0.1:0") }

// upgradeOriginOn is upgradeOrigin listening on addr.
func upgradeOriginOn(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/c/") {
			w.Header().Set("Cache-Control", "max-age=60")
		} else {
			w.Header().Set("Cache-Control", "no-store")
		}
		fmt.Fprint(w, "ok "+r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// The hitless-upgrade promise under load: 2,000 requests at 100/s through each stop (L7 HTTP, edge HTTP, DNS over UDP
// and over TCP, all four at once) across a binary upgrade of every stop: none fails, the old
// processes exit on their own, and the new ones run the binary now installed.
func testUpgradeDropsNoRequest(t *testing.T, built string) {
	if testing.Short() {
		t.Skip("20 s of load across upgrades; not in -short")
	}
	dir := t.TempDir()
	bin := copyBinary(t, built, dir)
	origin := upgradeOrigin(t)
	l7Addr, edgeAddr := freeAddr(t), freeAddr(t)
	l7cfg := filepath.Join(dir, "l7.yaml")
	os.WriteFile(l7cfg, []byte(fmt.Sprintf("listeners: [{address: %q}]\nroutes: [{name: all, pool: app}]\npools: [{name: app, backends: [{address: %q}]}]\n", l7Addr, origin)), 0o600)
	edgecfg := filepath.Join(dir, "edge.yaml")
	os.WriteFile(edgecfg, []byte(fmt.Sprintf("listen: %s\norigin: http://%s\nmemory:\n  max_bytes: 16MiB\n", edgeAddr, origin)), 0o600)
	dnscfg := filepath.Join(dir, "dns.yaml")
	os.WriteFile(dnscfg, []byte(dnsTestConfig), 0o600) // listen 127.0.0.1:0: the successor must find that socket again

	procs := map[string]*stopProc{
		"l7":   startStopProc(t, bin, dir, "l7", "--config", l7cfg),
		"edge": startStopProc(t, bin, dir, "edge", "--config", edgecfg),
		"dns":  startStopProc(t, bin, dir, "dns", "--config", dnscfg),
	}
	procs["l7"].waitLog(t, `"l7 listening"`)
	procs["edge"].waitLog(t, `edge listening on`)
	dnsAddr := procs["dns"].waitLog(t, `serving on (\S+) \(udp\+tcp\)`)

	const n, rate = 2000, 100
	l7c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	edgec := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	loads := []*load{{name: "l7 http"}, {name: "edge http"}, {name: "dns udp"}, {name: "dns tcp"}}
	dos := []func(int) error{
		func(i int) error { return httpGet(l7c, fmt.Sprintf("http://%s/n/%d", l7Addr, i), "ok ") },
		func(i int) error {
			if i%2 == 0 {
				return httpGet(edgec, fmt.Sprintf("http://%s/c/%d", edgeAddr, i%20), "ok ")
			}
			return httpGet(edgec, fmt.Sprintf("http://%s/n/%d", edgeAddr, i), "ok ")
		},
		func(int) error { return dnsAsk("udp", dnsAddr) },
		func(int) error { return dnsAsk("tcp", dnsAddr) },
	}
	var wg sync.WaitGroup
	for i, l := range loads {
		wg.Add(1)
		go func() { defer wg.Done(); l.run(n, rate, dos[i]) }()
	}
	// Upgrade every stop once the load is well under way.
	for loads[0].sent.Load() < 500 {
		time.Sleep(10 * time.Millisecond)
	}
	replaceBinary(t, bin)
	newPIDs := map[string]int{}
	var mu sync.Mutex
	var uwg sync.WaitGroup
	for stop, p := range procs {
		uwg.Add(1)
		go func() {
			defer uwg.Done()
			pid, out, err := upgradeStop(t, bin, stop, p.ctl)
			if err != nil {
				t.Errorf("%v", err)
				return
			}
			t.Logf("%s: %s", stop, strings.TrimSpace(out))
			mu.Lock()
			newPIDs[stop] = pid
			mu.Unlock()
		}()
	}
	uwg.Wait()
	for stop, p := range procs {
		select {
		case <-p.done:
			err := p.err
			if err != nil {
				t.Errorf("old %s process ended with %v after the upgrade; want a clean exit", stop, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("old %s process did not exit within 30 s of the upgrade", stop)
		}
		if pid := newPIDs[stop]; pid != 0 {
			exe, err1 := os.Stat(fmt.Sprintf("/proc/%d/exe", pid))
			now, err2 := os.Stat(bin)
			if err1 != nil || err2 != nil || !os.SameFile(exe, now) {
				t.Errorf("new %s process %d does not run the binary now at %s (%v %v)", stop, pid, bin, err1, err2)
			}
		}
	}
	wg.Wait()
	for _, l := range loads {
		t.Logf("%s: %d sent, %d failed", l.name, l.sent.Load(), l.fail.Load())
		if l.sent.Load() != n || l.fail.Load() != 0 {
			t.Errorf("%s: %d of %d requests failed across the upgrade: %s", l.name, l.fail.Load(), l.sent.Load(), strings.Join(l.errs, "; "))
		}
	}
}

// An upgrade whose new process cannot serve changes nothing: with a bad configuration the
// command fails naming the problem, with a binary that dies at once it fails saying so; each
// time the old process keeps serving, and a later good upgrade still works.
func testUpgradeFailureKeepsOldServing(t *testing.T, built string) {
	dir := t.TempDir()
	bin := copyBinary(t, built, dir)
	origin := upgradeOrigin(t)
	l7Addr, edgeAddr := freeAddr(t), freeAddr(t)
	cfgs := map[string]struct{ good, bad, want string }{
		"l7": {fmt.Sprintf("listeners: [{address: %q}]\nroutes: [{name: all, pool: app}]\npools: [{name: app, backends: [{address: %q}]}]\n", l7Addr, origin),
			fmt.Sprintf("listeners: [{address: %q}]\nroutes: [{name: all, pool: nope}]\n", l7Addr), "nope"},
		"edge": {fmt.Sprintf("listen: %s\norigin: http://%s\n", edgeAddr, origin), fmt.Sprintf("listen: %s\norigin: http://%s\nmemory:\n  max_byte: 1\n", edgeAddr, origin), "line 4"},
		"dns":  {dnsTestConfig, dnsTestConfig + "bogus: 1\n", "bogus"},
	}
	procs := map[string]*stopProc{}
	for stop, c := range cfgs {
		path := filepath.Join(dir, stop+".yaml")
		os.WriteFile(path, []byte(c.good), 0o600)
		procs[stop] = startStopProc(t, bin, dir, stop, "--config", path)
	}
	procs["l7"].waitLog(t, `"l7 listening"`)
	procs["edge"].waitLog(t, `edge listening on`)
	dnsAddr := procs["dns"].waitLog(t, `serving on (\S+) \(udp\+tcp\)`)
	serves := func(stop string) error {
		switch stop {
		case "l7":
			return httpGet(http.DefaultClient, "http://"+l7Addr+"/x", "ok ")
		case "edge":
			return httpGet(http.DefaultClient, "http://"+edgeAddr+"/x", "ok ")
		}
		if err := dnsAsk("udp", dnsAddr); err != nil {
			return err
		}
		return dnsAsk("tcp", dnsAddr)
	}
	alive := func(stop, when string) {
		t.Helper()
		select {
		case <-procs[stop].done:
			err := procs[stop].err
			t.Fatalf("%s: the old process exited (%v) %s", stop, err, when)
		default:
		}
		if err := serves(stop); err != nil {
			t.Fatalf("%s: the old process does not serve %s: %v", stop, when, err)
		}
	}

	var wg sync.WaitGroup
	for stop, c := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			os.WriteFile(filepath.Join(dir, stop+".yaml"), []byte(c.bad), 0o600)
			_, out, err := upgradeStop(t, bin, stop, procs[stop].ctl)
			t.Logf("%s upgrade to a bad configuration: %s", stop, strings.TrimSpace(out))
			if err == nil || !strings.Contains(out, "keeps serving") || !strings.Contains(out, c.want) {
				t.Errorf("%s upgrade with a bad configuration: %v; want an error saying the old process keeps serving and naming %q", stop, err, c.want)
			}
		}()
	}
	wg.Wait()
	for stop := range cfgs {
		alive(stop, "after an upgrade to a bad configuration")
	}

	// A binary that dies before it takes over (here: not switchyard at all); the command is run
	// from a copy of the good one.
	good, _ := os.ReadFile(bin)
	cli := filepath.Join(dir, "switchyard-cli")
	os.WriteFile(cli, good, 0o755)
	os.WriteFile(bin+".new", []byte("#!/bin/sh\nexit 3\n"), 0o755)
	os.Rename(bin+".new", bin)
	os.WriteFile(filepath.Join(dir, "l7.yaml"), []byte(cfgs["l7"].good), 0o600)
	_, out, err := upgradeStop(t, cli, "l7", procs["l7"].ctl)
	t.Logf("l7 upgrade to a crashing binary: %s", strings.TrimSpace(out))
	if err == nil || !strings.Contains(out, "exited before taking over") || !strings.Contains(out, "keeps serving") {
		t.Errorf("l7 upgrade to a crashing binary: %v; want it to say the new process exited and the old keeps serving", err)
	}
	alive("l7", "after an upgrade to a crashing binary")

	// Fixed: the same old process upgrades fine.
	os.WriteFile(bin+".new", good, 0o755)
	os.Rename(bin+".new", bin)
	if _, out, err := upgradeStop(t, bin, "l7", procs["l7"].ctl); err != nil {
		t.Fatalf("l7 upgrade after the fix: %v\n%s", err, out)
	}
	select {
	case <-procs["l7"].done:
	case <-time.After(30 * time.Second):
		t.Fatal("the old l7 process did not exit after a good upgrade")
	}
	if err := serves("l7"); err != nil {
		t.Fatalf("the new l7 process does not serve: %v", err)
	}
}

// The control socket is owner-only, and a second process cannot take it over by starting on it;
// SIGUSR2 upgrades like the command.
func testUpgradeControlSocket(t *testing.T, built string) {
	dir := t.TempDir()
	bin := copyBinary(t, built, dir)
	path := filepath.Join(dir, "dns.yaml")
	os.WriteFile(path, []byte(dnsTestConfig), 0o600)
	p := startStopProc(t, bin, dir, "dns", "--config", path)
	addr := p.waitLog(t, `serving on (\S+) \(udp\+tcp\)`)
	defer func() {
		p.cmd.Process.Signal(syscall.SIGUSR2)
		pid, _ := strconv.Atoi(p.waitLog(t, `the new process serves.* new_pid=(\d+)`))
		t.Cleanup(func() { stopPID(pid) })
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Fatal("the old dns did not exit after SIGUSR2")
		}
		if err := dnsAsk("udp", addr); err != nil {
			t.Fatalf("after SIGUSR2 nothing answers: %v", err)
		}
	}()
	st, err := os.Stat(p.ctl)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("control socket mode %v; want an owner-only (0600) socket", st.Mode())
	}
	out, err := exec.Command(bin, "dns", "run", "--config", path, "--control", p.ctl).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "dns upgrade --control") {
		t.Errorf("a second dns run on the same control socket: %v\n%s\nwant a refusal naming `switchyard dns upgrade`", err, out)
	}
	if out, err := exec.Command(bin, "dns", "upgrade", "--control", filepath.Join(dir, "nothing.sock")).CombinedOutput(); err == nil || !strings.Contains(string(out), "--control") {
		t.Errorf("upgrade without a running process: %v\n%s", err, out)
	}
}
