package lab

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/bird"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
)

// Fleet operations on a lab brought up in daemon mode: start a balancer's daemon (a standby one
// of `UpOptions.Standby`, or one that was killed), kill one as a crash does, cut a node off the
// store. Tests and the fleet experiment share them.

// ConfigPath is the daemon configuration file the lab wrote for a balancer namespace.
func ConfigPath(prefix, ns string) string { return filepath.Join(StateDir(prefix), ns+".yaml") }

// BalancerArgv is the command line of balancer n's daemon: `lb run` on the file the lab wrote,
// with the store when the lab has one, and /metrics on the namespace's loopback (observe.go).
func BalancerArgv(st *State, exe string, n topo.Node) []string {
	return append([]string{exe, "lb", "run", "--config", ConfigPath(st.Prefix, n.NS), "--metrics", lbMetrics}, storeArgs(st)...)
}

// StartBalancer starts balancer n's daemon (again) and waits until its socket answers. A
// program left attached by a killed daemon is adopted; after KillBalancer it attaches afresh.
func StartBalancer(st *State, exe string, n topo.Node) error {
	p, err := StartProcess(st.Prefix, n.Name, n.NS, BalancerArgv(st, exe, n)...)
	if err != nil {
		return err
	}
	st.Procs = append(st.Procs, p)
	sock := SocketPath(st.Prefix, n.NS)
	st.Sockets[n.NS] = sock
	return waitAnswering(sock, n.Name, p.Log, balancerStartTimeout)
}

// balancerStartTimeout bounds a daemon's start: loading and verifying the forwarder, the first
// store listing and apply. Under a loaded machine (CI with other suites) the verifier alone
// has taken over 10 s, so a shorter wait turned a slow start into a failed test.
const balancerStartTimeout = 60 * time.Second

// waitAnswering waits until the daemon on sock answers a status call: its socket file exists
// from the daemon's first step, but calls wait in the backlog until it has loaded and applied.
func waitAnswering(sock, name, logPath string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := api.NewClient(sock).Call(ctx, api.OpStatus, api.Empty{}, nil)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("start %s: its daemon did not answer within %s: %w; the end of %s:\n%s", name, timeout, err, logPath, logTail(logPath, 15))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// SessionReport is what to read when bird's session with balancer n does not come up: bird's
// view of the session, bird's log lines naming n and the end of n's daemon log. The lab is
// gone by the time anyone reads a failed test, so a test's error carries it.
func SessionReport(st *State, n topo.Node) string {
	dir := StateDir(st.Prefix)
	var named []string
	if b, err := os.ReadFile(filepath.Join(dir, "bird.log")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, n.Name) {
				named = append(named, l)
			}
		}
	}
	return fmt.Sprintf("bird's session:\n%s\nbird's log on %s (last 20):\n%s\nthe end of %s.log:\n%s",
		bird.ProtocolDetail(BirdDir(st.Prefix), n.Name), n.Name, strings.Join(named[max(0, len(named)-20):], "\n"),
		n.Name, logTail(filepath.Join(dir, n.Name+".log"), 20))
}

// logTail is the last n lines of a log file (a lab is often gone before anyone reads it).
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// KillBalancer ends balancer n the way a crash does: SIGKILL to its daemon (the kernel closes
// its BGP session), then its XDP program and pins are removed, as a node that is gone has
// none. It returns when the process is gone and the interface runs no program.
func KillBalancer(st *State, n topo.Node) error {
	pid, ok := readPID(StateDir(st.Prefix), n.Name)
	if ok && exists(pid) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill %s: %w", n.Name, err)
		}
		for deadline := time.Now().Add(10 * time.Second); exists(pid); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				return fmt.Errorf("kill %s: pid %d still there after 10s", n.Name, pid)
			}
		}
	}
	pin := PinDir(n.NS, n.Iface)
	if err := loader.Detach(pin); err != nil && !strings.Contains(err.Error(), "nothing pinned") {
		return fmt.Errorf("kill %s: %w", n.Name, err)
	}
	// The kernel releases the last reference to the link after the process is gone, not
	// always at once: wait until the interface runs no program, or a daemon started right
	// after could find it still attached.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ifs, err := topo.Interfaces(n.NS)
		if err != nil {
			return fmt.Errorf("kill %s: %w", n.Name, err)
		}
		attached := false
		for _, f := range ifs {
			attached = attached || (f.Name == n.Iface && f.XDP != 0)
		}
		if !attached {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kill %s: its XDP program is still attached to %s 10s after the detach", n.Name, n.Iface)
		}
	}
}

// PauseBalancer stops balancer n's daemon (SIGSTOP: a hung process; its TCP sessions stay open
// and its program keeps forwarding) or lets it run again (SIGCONT).
func PauseBalancer(st *State, n topo.Node, pause bool) error {
	pid, ok := readPID(StateDir(st.Prefix), n.Name)
	if !ok || !exists(pid) {
		return fmt.Errorf("pause %s: its daemon is not running", n.Name)
	}
	sig := syscall.SIGCONT
	if pause {
		sig = syscall.SIGSTOP
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("pause %s (%s): %w", n.Name, sig, err)
	}
	return nil
}

// RestartBalancer replaces balancer n's daemon the way a binary upgrade does (docs/fleet.md):
// SIGKILL, so the program stays attached and forwarding and the BGP session ends without a
// NOTIFICATION, then a new `lb run` that adopts the program and restarts gracefully. It returns
// once the new daemon answers.
func RestartBalancer(st *State, exe string, n topo.Node) error {
	pid, ok := readPID(StateDir(st.Prefix), n.Name)
	if !ok || !exists(pid) {
		return fmt.Errorf("restart %s: its daemon is not running", n.Name)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("restart %s: %w", n.Name, err)
	}
	for deadline := time.Now().Add(10 * time.Second); exists(pid); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("restart %s: pid %d still there after 10s", n.Name, pid)
		}
	}
	return StartBalancer(st, exe, n)
}

// CutStore drops balancer n's traffic to and from etcd with nftables in its namespace (its
// watch is cut, its process runs on), or removes the cut.
func CutStore(n topo.Node, cut bool) error {
	script := "delete table inet sycut\n"
	if cut {
		script = fmt.Sprintf("table inet sycut {\n chain out { type filter hook output priority 0; tcp dport %d drop; }\n chain in { type filter hook input priority 0; tcp sport %d drop; }\n}\n", storeClient, storeClient)
	}
	cmd := exec.Command("nsenter", "--net="+namednetns.Path(n.NS), "--", "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("cut store of %s (nft): %v: %s", n.NS, err, out)
	}
	return nil
}
