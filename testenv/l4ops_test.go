package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
)

// TestDrain: 200 open keep-alive connections to a backend keep working while it is drained; no
// new connection reaches it; `backend list` shows its active flows fall to zero as they close.
func TestDrain(t *testing.T) {
	d := newDaemonLab(t, 2)
	l := d.Lab()
	be1 := l.Topo.ByRole(topo.Backend)[0]
	vip := fmt.Sprintf("%s:80", lab.WebVIP4)
	var held []*keepAliveConn
	defer func() {
		for _, k := range held {
			k.c.Close()
		}
	}()
	// Open connections until 200 land on be1 (Maglev sends about half there); bounded.
	for tries := 0; len(held) < 200 && tries < 1000; tries++ {
		k, err := dialKeepAlive(l.Client(1+tries%2).NS, vip)
		if err != nil {
			t.Fatal(err)
		}
		name, err := k.do("/open")
		if err != nil {
			t.Fatalf("connection %d: %v", tries, err)
		}
		if name == be1.Name {
			held = append(held, k)
		} else {
			k.c.Close()
		}
	}
	if len(held) < 200 {
		t.Fatalf("only %d connections reached %s", len(held), be1.Name)
	}
	testutil.Eventually(t, 10*time.Second, func() bool {
		return d.backend(t, "web", be1.Addr4.String()).ActiveFlows >= 200
	}, "no 200 active flows on be1")
	if _, err := d.cli("backend", "drain", "web", be1.Addr4.String()); err != nil {
		t.Fatal(err)
	}
	if r := d.backend(t, "web", be1.Addr4.String()); r.State != "draining" || r.InRing {
		t.Fatalf("after drain: %+v, want draining and out of the ring", r)
	}
	// Established connections keep working, on be1.
	for i, k := range held {
		name, err := k.do("/while-draining")
		if err != nil || name != be1.Name {
			t.Fatalf("held connection %d during drain: %s, %v", i, name, err)
		}
	}
	// No new connection reaches be1.
	for i := 0; i < 60; i++ {
		_, name, _, err := get(d.c1, fmt.Sprintf("http://%s/new/%d", vip, i))
		if err != nil {
			t.Fatal(err)
		}
		if name == be1.Name {
			t.Fatalf("new connection %d reached drained %s", i, be1.Name)
		}
	}
	// Close half, then the rest: the active flows shown fall with them.
	for _, k := range held[:100] {
		k.c.Close()
	}
	testutil.Eventually(t, 15*time.Second, func() bool {
		return d.backend(t, "web", be1.Addr4.String()).ActiveFlows <= 100
	}, "be1 active flows still over 100 after closing 100")
	mid := d.backend(t, "web", be1.Addr4.String()).ActiveFlows
	for _, k := range held[100:] {
		k.c.Close()
	}
	held = nil
	testutil.Eventually(t, 15*time.Second, func() bool {
		return d.backend(t, "web", be1.Addr4.String()).ActiveFlows == 0
	}, "be1 active flows not 0 after closing all")
	t.Logf("active flows on drained be1: 200+ -> %d -> 0", mid)
}

// TestHealth: the app on one backend fails; within fall x interval (3 x 1s, plus a check
// timeout and slack) no new connection goes there; it recovers and traffic returns.
func TestHealth(t *testing.T) {
	d := newDaemonLab(t, 3)
	be1 := d.Lab().Topo.ByRole(topo.Backend)[0]
	vip := fmt.Sprintf("http://%s/h", lab.WebVIP4)
	d.admin(t, be1, "fail?on=1")
	failed := time.Now()
	testutil.Eventually(t, 10*time.Second, func() bool {
		return d.backend(t, "web", be1.Addr4.String()).Health == "unhealthy"
	}, "be1 not marked unhealthy")
	took := time.Since(failed)
	t.Logf("be1 marked unhealthy %.1fs after it started failing (fall 3 x interval 1s)", took.Seconds())
	// fall x interval = 3 s, plus one check timeout (0.5 s) and slack for a loaded machine and
	// for the polling through the CLI.
	if took > 3*time.Second+500*time.Millisecond+2*time.Second {
		t.Errorf("be1 marked unhealthy after %s, want within fall x interval (3s) plus a timeout", took)
	}
	for i := 0; i < 60; i++ {
		code, name, _, err := get(d.c1, fmt.Sprintf("%s/%d", vip, i))
		if err != nil {
			t.Fatal(err)
		}
		if name == be1.Name || code != 200 {
			t.Fatalf("new connection %d after be1 failed: %d from %s", i, code, name)
		}
	}
	d.admin(t, be1, "fail?on=0")
	testutil.Eventually(t, 10*time.Second, func() bool {
		return d.backend(t, "web", be1.Addr4.String()).Health == "healthy"
	}, "be1 not healthy again")
	back := 0
	for i := 0; i < 60; i++ {
		_, name, _, err := get(d.c1, fmt.Sprintf("%s/back/%d", vip, i))
		if err != nil {
			t.Fatal(err)
		}
		if name == be1.Name {
			back++
		}
	}
	if back < 8 {
		t.Errorf("after recovery be1 got %d of 60 new connections, want about a third", back)
	}
}

// TestRestartAndUpgrade: 500 requests 20 ms apart, each on a new connection, while the daemon
// is restarted (SIGTERM, start again: it adopts the pinned maps and link) and then upgraded
// (killed, and another binary started: the link's program is swapped atomically): zero
// failures.
func TestRestartAndUpgrade(t *testing.T) {
	d := newDaemonLab(t, 2)
	l := d.Lab()
	lbn := l.Balancer()
	upgraded := filepath.Join(t.TempDir(), "switchyard-next")
	b, err := os.ReadFile(d.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(upgraded, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(lab.StateDir(d.Prefix), lbn.NS+".yaml")
	var wg sync.WaitGroup
	wg.Add(1)
	var stepErr error
	go func() {
		defer wg.Done()
		time.Sleep(2 * time.Second)
		if err := lab.StopProcess(d.Prefix, lbn.Name, 5*time.Second); err != nil {
			stepErr = err
			return
		}
		time.Sleep(500 * time.Millisecond) // no daemon at all for a while: XDP keeps forwarding
		if _, err := lab.StartProcess(d.Prefix, lbn.Name, lbn.NS, d.bin, "lb", "run", "--config", cfg); err != nil {
			stepErr = err
			return
		}
		time.Sleep(3 * time.Second)
		if err := lab.StopProcess(d.Prefix, lbn.Name, 0); err != nil { // SIGKILL: a crash
			stepErr = err
			return
		}
		if _, err := lab.StartProcess(d.Prefix, lbn.Name+"-next", lbn.NS, upgraded, "lb", "run", "--config", cfg); err != nil {
			stepErr = err
		}
	}()
	failures := 0
	var firstErr error
	for i := 0; i < 500; i++ {
		code, _, _, err := get(d.c1, fmt.Sprintf("http://%s/r/%d", lab.WebVIP4, i))
		if err != nil || code != 200 {
			failures++
			if firstErr == nil {
				firstErr = fmt.Errorf("request %d: %d %v", i, code, err)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if stepErr != nil {
		t.Fatal(stepErr)
	}
	if failures > 0 {
		t.Errorf("%d of 500 requests failed across restart and upgrade; first: %v", failures, firstErr)
	}
	logb, _ := os.ReadFile(filepath.Join(lab.StateDir(d.Prefix), lbn.Name+"-next.log"))
	if !strings.Contains(string(logb), "adopted=true") {
		t.Errorf("the upgraded daemon did not adopt the pinned forwarder; its log:\n%s", logb)
	}
	if _, err := d.backends("web"); err != nil {
		t.Errorf("the upgraded daemon does not answer on its socket: %v", err)
	}
}

// TestDaemonServesEveryVIP: the configuration `lab up` writes for `switchyard lb run` serves
// the IPv6 VIP and the UDP VIP too, not only the IPv4 TCP one.
func TestDaemonServesEveryVIP(t *testing.T) {
	d := newDaemonLab(t, 2)
	code, name, _, err := get(d.c1, fmt.Sprintf("http://[%s]/v6", lab.WebVIP6))
	if err != nil || code != 200 || name == "" {
		t.Fatalf("IPv6 VIP through the daemon: %d %q %v", code, name, err)
	}
	conn, err := namednetns.Dialer(d.Lab().Client(1).NS, nil)(context.Background(), "udp", fmt.Sprintf("%s:7", lab.WebVIP4))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	conn.Write([]byte("ping"))
	buf := make([]byte, 100)
	n, err := conn.Read(buf)
	if err != nil || !strings.HasSuffix(string(buf[:n]), " ping") {
		t.Fatalf("UDP VIP through the daemon: %q %v", buf[:n], err)
	}
}
