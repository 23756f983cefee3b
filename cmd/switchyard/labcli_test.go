package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
)

// TestLabUpDaemonCLI is the operator's path through a lab run by a binary not named switchyard:
// `lab up` works (it runs os.Executable) and prints the daemon's socket, `vip list` finds that
// socket without --socket, a VIP added through the CLI survives a second `lab up` and a restart
// of the daemon (the second `lab up` keeps the daemon's saved configuration and says so).
func TestLabUpDaemonCLI(t *testing.T) {
	testutil.RequireLab(t)
	bin := buildLabBinary(t, "sy")
	prefix := labPrefix(t, "k")
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SWITCHYARD_") {
			env = append(env, e)
		}
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	up := []string{"lab", "up", "--prefix", prefix, "--clients", "1", "--balancers", "1", "--backends", "2",
		"--l7", "0", "--no-dns", "--no-edge", "--static-routes", "--store-members", "0"}
	out, err := run(up...)
	if err != nil {
		t.Fatalf("lab up from a binary named sy: %v\n%s", err, out)
	}
	sock := lab.SocketPath(prefix, prefix+"-lb1")
	if !strings.Contains(out, sock) {
		t.Errorf("lab up does not print the daemon socket %s:\n%s", sock, out)
	}
	// The default path: the CLI looks in the lab's state directory. Other labs or daemons on
	// this machine (other tests) make the default ambiguous; then name the lab.
	var sel []string
	if others, _ := filepath.Glob("/run/switchyard/*.sock"); len(others) > 0 || len(lab.DaemonSockets("")) > 1 {
		t.Logf("other daemons run here (%v): naming the lab with --lab", others)
		sel = []string{"--lab", prefix}
	}
	vipList := func() (string, error) { return run(append([]string{"vip", "list"}, sel...)...) }
	if out, err := vipList(); err != nil || !strings.Contains(out, "198.18.100.1") {
		t.Fatalf("vip list after lab up: %v\n%s", err, out)
	}
	st, err := lab.LoadState(prefix)
	if err != nil {
		t.Fatal(err)
	}
	be := st.Topo.ByRole(topo.Backend)[0].Addr4.String()
	if out, err := run(append([]string{"vip", "add", "extra", "198.18.100.5:80", "--backend", be}, sel...)...); err != nil {
		t.Fatalf("vip add: %v\n%s", err, out)
	}
	out, err = run(up...)
	if err != nil {
		t.Fatalf("second lab up: %v\n%s", err, out)
	}
	if !strings.Contains(out, "the lab was up: kept") {
		t.Errorf("the second lab up does not say it kept the daemon's configuration:\n%s", out)
	}
	if b, _ := os.ReadFile(lab.ConfigPath(prefix, prefix+"-lb1")); !strings.Contains(string(b), "extra") {
		t.Errorf("the second lab up rewrote the daemon's configuration, the VIP added through the CLI is gone:\n%s", b)
	}
	// The daemon's next start reads that file: stop it, and `lab up` starts it again.
	if procs, _ := lab.Running(prefix); procs["lb1"] == 0 {
		t.Fatalf("no running balancer daemon lb1 to restart: %v", procs)
	}
	if err := lab.StopProcess(prefix, "lb1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if out, err := run(up...); err != nil {
		t.Fatalf("lab up after the daemon stopped: %v\n%s", err, out)
	}
	testutil.Eventually(t, 30*time.Second, func() bool {
		out, err = vipList()
		return err == nil && strings.Contains(out, "extra")
	}, "after a restart of the daemon, vip list lacks the VIP added through the CLI: %v\n%s", func() any { return err }, func() any { return out })
	if out, err := run("lab", "down", "--prefix", prefix); err != nil {
		t.Fatalf("lab down: %v\n%s", err, out)
	}
}

// TestLabDemoEveryStop: with a daemon balancer, an L7 proxy, the edge and DNS, the demo's lines
// show what every stop counts (balancer packets, L7 requests, edge hits, DNS queries), and the
// summary at the end the same over the whole run; the edge serves HTTPS (HTTP/1.1 and HTTP/2) with
// a certificate the lab's Pebble issued by dns-01 through the DNS stop.
func TestLabDemoEveryStop(t *testing.T) {
	testutil.RequireLab(t)
	bin := buildLabBinary(t, "switchyard")
	t.Setenv("SWITCHYARD_BIN", bin)
	prefix := labPrefix(t, "e")
	out, err := runLab(t, "lab", "demo", "--prefix", prefix, "--duration", "8s", "--rate", "60", "--clients", "1",
		"--balancers", "1", "--backends", "2", "--l7", "1", "--static-routes", "--store-members", "0")
	if err != nil {
		t.Fatalf("lab demo: %v\n%s", err, out)
	}
	every := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "t=") && strings.Contains(l, " pkt/s") && strings.Contains(l, "l7 ") && strings.Contains(l, "% hits") && strings.Contains(l, " q/s") {
			every++
		}
	}
	if every < 2 {
		t.Errorf("want >= 2 lines with the balancer, L7, edge and DNS counters:\n%s", out)
	}
	for _, want := range []string{"summary after ", "balancer  XDP packets/s by VIP: ", "l7        requests/s by pool: ", "edge      hits/s ", "dns       queries/s ",
		"https: certificates Pebble issued by ACME dns-01 through the lab's DNS stop: edge serves static.lab.test"} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	// HTTPS over HTTP/1.1 and HTTP/2 reached the edge with the issued certificate: the clients'
	// final counts (a response over another protocol counts as failed).
	sum := out[strings.LastIndex(out, "summary after "):]
	for _, target := range []string{"https", "h2"} {
		m := regexp.MustCompile(`\b` + target + ` ok=(\d+) failed=(\d+)`).FindStringSubmatch(sum)
		if m == nil || m[1] == "0" {
			t.Errorf("no %s request answered 200 over its protocol:\n%s", target, sum)
		}
	}
}

// TestLabUpKeepsStore: in a lab whose daemons take their VIPs from the store, a VIP removed
// through the CLI stays removed after a second `lab up` (which used to seed it again).
func TestLabUpKeepsStore(t *testing.T) {
	testutil.RequireLab(t)
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd not installed (make deps installs etcd-server)")
	}
	bin := buildLabBinary(t, "switchyard")
	t.Setenv("SWITCHYARD_BIN", bin)
	prefix := labPrefix(t, "s")
	up := []string{"lab", "up", "--prefix", prefix, "--clients", "1", "--balancers", "1", "--backends", "1",
		"--l7", "0", "--no-dns", "--no-edge", "--static-routes", "--store-members", "1"}
	if out, err := runLab(t, up...); err != nil {
		t.Fatalf("lab up: %v\n%s", err, out)
	}
	sock := []string{"--lab", prefix}
	if out, err := runLab(t, append([]string{"vip", "remove", "echo"}, sock...)...); err != nil {
		t.Fatalf("vip remove: %v\n%s", err, out)
	}
	out, err := runLab(t, up...)
	if err != nil {
		t.Fatalf("second lab up: %v\n%s", err, out)
	}
	if !strings.Contains(out, "and the VIPs in the store") {
		t.Errorf("the second lab up does not say it kept the store's VIPs:\n%s", out)
	}
	// The daemon follows the store: give a re-seeded VIP the time to show up.
	time.Sleep(2 * time.Second)
	if out, err := runLab(t, append([]string{"vip", "list"}, sock...)...); err != nil || strings.Contains(out, "echo") || !strings.Contains(out, "web") {
		t.Errorf("vip list after the second lab up: %v (want web and no echo)\n%s", err, out)
	}
}
