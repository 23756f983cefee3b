package testutil

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The loopback ports etcd servers of the tests listen on (client and peer), a range no other
// test uses: tests of several packages run at once, each starting its own servers.
// SWITCHYARD_TEST_ETCD_PORTS=FIRST-LAST replaces it, so that several people's runs on one
// machine each keep to their own ports.
const etcdPortFirst, etcdPortLast = 21500, 21599

// etcdPortRange is the range in use: SWITCHYARD_TEST_ETCD_PORTS, else the default.
func etcdPortRange(t testing.TB) (first, last int) {
	s := os.Getenv("SWITCHYARD_TEST_ETCD_PORTS")
	if s == "" {
		return etcdPortFirst, etcdPortLast
	}
	if _, err := fmt.Sscanf(s, "%d-%d", &first, &last); err != nil || first < 1024 || last < first || last > 65535 {
		t.Fatalf("SWITCHYARD_TEST_ETCD_PORTS=%q: give FIRST-LAST, e.g. 47400-47499", s)
	}
	return first, last
}

// Etcd is one real etcd server (Debian's etcd-server) on loopback, a single-member cluster with
// a data directory of the test's own.
type Etcd struct {
	// Endpoint is its client address, HOST:PORT (as a store URL names it:
	// etcd://ENDPOINT/PREFIX).
	Endpoint string

	dir, client, peer string
	cmd               *exec.Cmd
	done              chan struct{}
	out               *SyncBuffer
	// tls is set by StartEtcdTLS.
	tls *EtcdTLS
}

// StartEtcd runs an etcd server until the test ends; the test is skipped when etcd is not
// installed.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("etcd not installed: apt-get install etcd-server (make deps)")
	}
	return startEtcd(t, nil)
}

func startEtcd(t testing.TB, tl *EtcdTLS) *Etcd {
	t.Helper()
	e := &Etcd{dir: t.TempDir(), tls: tl}
	scheme := "http://"
	if tl != nil {
		scheme = "https://"
	}
	// A port free when picked may be taken before etcd binds it (another package's test picks
	// from the same range): then etcd exits at once, and another pair of ports is tried.
	for attempt := 1; ; attempt++ {
		cp := etcdPort(t)
		pp := etcdPort(t)
		e.Endpoint = fmt.Sprintf("127.0.0.1:%d", cp)
		e.client, e.peer = scheme+e.Endpoint, fmt.Sprintf("http://127.0.0.1:%d", pp)
		err := e.run()
		if err == nil {
			break
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		os.RemoveAll(e.dir) // a fresh cluster on the new ports, not the failed member's state
	}
	t.Cleanup(func() {
		e.Stop()
		if t.Failed() {
			t.Logf("etcd output:\n%s", e.out.String())
		}
	})
	return e
}

// Stop kills the server (no clean shutdown: as a crashed or unreachable member); Start brings
// it back on its data directory.
func (e *Etcd) Stop() {
	if e.cmd != nil {
		e.cmd.Process.Kill()
		<-e.done
		e.cmd = nil
	}
}

// Start runs the server again after Stop, on the same ports and data directory.
func (e *Etcd) Start(t testing.TB) {
	t.Helper()
	if err := e.run(); err != nil {
		t.Fatal(err)
	}
}

// run starts etcd and waits until it listens for clients, or reports why it did not.
func (e *Etcd) run() error {
	if e.cmd != nil {
		return fmt.Errorf("start etcd: already running on %s", e.Endpoint)
	}
	e.out = &SyncBuffer{}
	args := []string{"--name", "m1", "--data-dir", e.dir,
		"--listen-client-urls", e.client, "--advertise-client-urls", e.client,
		"--listen-peer-urls", e.peer, "--initial-advertise-peer-urls", e.peer,
		"--initial-cluster", "m1=" + e.peer, "--initial-cluster-state", "new"}
	if e.tls != nil {
		args = append(args, e.tls.serverArgs()...)
	}
	cmd := exec.Command("etcd", args...)
	cmd.Stdout, cmd.Stderr = e.out, e.out
	// Killed with the test binary, even when it dies before its cleanups run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	e.cmd, e.done = cmd, done
	// Ready is healthy, not listening: a member killed (Stop) before it has elected itself and
	// committed the cluster's first entries comes back unable to elect a leader. 60 s: a restart
	// on an old data directory replays its WAL, which took over 20 s on a loaded machine (load 14).
	exited := false
	hc := &http.Client{Timeout: time.Second}
	if e.tls != nil {
		hc.Transport = &http.Transport{TLSClientConfig: e.tls.rootConfig}
	}
	defer hc.CloseIdleConnections()
	healthy := poll(60*time.Second, func() bool {
		select {
		case <-done:
			exited = true
			return true
		default:
		}
		resp, err := hc.Get(e.client + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && strings.Contains(string(b), `"health":"true"`)
	})
	switch {
	case exited:
		e.cmd = nil
		return fmt.Errorf("start etcd on %s: it exited: %s", e.Endpoint, lastLines(e.out.String(), 5))
	case !healthy:
		e.Stop()
		return fmt.Errorf("start etcd: not healthy on %s within 60s: %s", e.Endpoint, lastLines(e.out.String(), 5))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

var etcdPorts struct {
	sync.Mutex
	next int
}

// etcdPort returns a port of the range free on 127.0.0.1 now, never the same twice in a row
// within this process. Each process starts at its own offset so that packages run at once
// rarely contend for a port.
func etcdPort(t testing.TB) int {
	t.Helper()
	etcdPorts.Lock()
	defer etcdPorts.Unlock()
	first, last := etcdPortRange(t)
	n := last - first + 1
	if etcdPorts.next == 0 {
		etcdPorts.next = first + os.Getpid()%n
	}
	for range n {
		p := etcdPorts.next
		etcdPorts.next++
		if etcdPorts.next > last {
			etcdPorts.next = first
		}
		if ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			ln.Close()
			return p
		}
	}
	t.Fatalf("no free port in %d-%d for etcd", first, last)
	return 0
}
