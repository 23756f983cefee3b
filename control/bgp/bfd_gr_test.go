package bgp

import (
	"bufio"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/lab/bird"
)

// servingEnv runs this test binary as a long-lived speaker (serveChild) inside the node namespace.
const servingEnv = "SWITCHYARD_BGP_TEST_SERVE"

// serveArgs configure a serving speaker.
type serveArgs struct {
	BFD         bool
	RestartTime time.Duration
	Restarting  bool
}

// serveStatus is what a serving speaker prints every 50 ms.
type serveStatus struct {
	Established, GR bool
	BFD             string
}

// TestServeChild is not a test of its own: it is the speaker process of the BFD and graceful
// restart tests, run inside their node namespace (it returns at once elsewhere).
func TestServeChild(t *testing.T) {
	v := os.Getenv(servingEnv)
	if v == "" {
		return
	}
	var a serveArgs
	if err := json.Unmarshal([]byte(v), &a); err != nil {
		t.Fatal(err)
	}
	p := Peer{Addr: routerAddr4, ASN: 65000, HoldTime: 3 * time.Second, Password: "lab-secret"}
	if a.BFD {
		p.BFD = &BFD{MinRx: 100 * time.Millisecond, MinTx: 100 * time.Millisecond, Multiplier: 3}
	}
	s, err := Start(Options{ASN: 65001, RouterID: nodeAddr4, NextHop4: nodeAddr4, NextHop6: nodeAddr6,
		RestartTime: a.RestartTime, Peers: []Peer{p}})
	if err != nil {
		t.Fatal(err)
	}
	s.Set([]netip.Prefix{vip4})
	if err := s.Connect(a.Restarting); err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(os.Stdout)
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		ss, err := s.Sessions(t.Context())
		if err != nil || len(ss) != 1 {
			continue
		}
		st := serveStatus{Established: ss[0].Established, GR: ss[0].GracefulRestart}
		if ss[0].BFD != nil {
			st.BFD = ss[0].BFD.State
		}
		enc.Encode(st)
	}
	s.Stop()
}

// speakerProc is a serving speaker process in the node namespace.
type speakerProc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	last serveStatus
}

func startSpeaker(t *testing.T, node string, a serveArgs) *speakerProc {
	t.Helper()
	b, _ := json.Marshal(a)
	cmd := exec.Command("nsenter", "--net=/run/netns/"+node, "--", os.Args[0], "-test.run", "^TestServeChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), servingEnv+"="+string(b))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &speakerProc{cmd: cmd}
	t.Cleanup(func() { p.kill(syscall.SIGKILL) })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var st serveStatus
			if json.Unmarshal(sc.Bytes(), &st) == nil {
				p.mu.Lock()
				p.last = st
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *speakerProc) status() serveStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// kill signals the speaker (nsenter execs the test binary, so the pid is the speaker's).
func (p *speakerProc) kill(sig syscall.Signal) {
	if p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	if sig == syscall.SIGKILL {
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_, _ = p.cmd.Process.Wait()
	}
}

// waitUp waits until the speaker reports its session established (with BFD up and graceful
// restart negotiated when asked) and the router's kernel routes vip4 through the node.
func waitUp(t *testing.T, p *speakerProc, rt string, a serveArgs) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := p.status()
		ok := st.Established && (!a.BFD || st.BFD == "up") && (a.RestartTime == 0 || st.GR) &&
			len(kernelVia(t, rt, vip4)) == 1
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("speaker not up with the route installed: %+v, route via %v", st, kernelVia(t, rt, vip4))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// routeGone polls the router's kernel route to vip4 every 10 ms and returns how long after start
// it disappeared (or -1 when it stayed for d).
func routeGone(t *testing.T, rt string, start time.Time, d time.Duration) time.Duration {
	t.Helper()
	for time.Since(start) < d {
		if len(kernelVia(t, rt, vip4)) == 0 {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}

func birdConf(bfd, gr bool) bird.Config {
	c := bird.Config{RouterID: routerAddr4, ASN: 65000, HoldTime: 3 * time.Second, GracefulRestart: gr,
		Neighbors: []bird.Neighbor{{Name: "node", Addr: nodeAddr4, ASN: 65001, Password: "lab-secret"}}}
	if bfd {
		c.BFD = &bird.BFD{MinRx: 100 * time.Millisecond, MinTx: 100 * time.Millisecond, Multiplier: 3}
	}
	return c
}

// TestBGPBFDWithBird: with BFD at 100 ms x 3 on both sides, a speaker that stops answering
// (SIGSTOP: its TCP session stays open) is withdrawn by bird within the detection time plus the
// router's own work, far inside the 3 s hold time; the speaker reports BFD up while it runs.
func TestBGPBFDWithBird(t *testing.T) {
	rt, node, _ := routerAndNode(t, birdConf(true, false))
	a := serveArgs{BFD: true}
	p := startSpeaker(t, node, a)
	waitUp(t, p, rt, a)
	start := time.Now()
	p.kill(syscall.SIGSTOP)
	gone := routeGone(t, rt, start, 3*time.Second)
	t.Logf("SIGSTOP to route withdrawn with BFD 100 ms x 3: %s", gone)
	if gone < 0 || gone > time.Second {
		t.Fatalf("route not withdrawn within 1 s of the speaker stopping (BFD detection 300 ms): %s", gone)
	}
}

// TestBGPGracefulRestartWithBird: with graceful restart negotiated, a speaker killed (SIGKILL: the
// kernel closes the session without a NOTIFICATION) and started again as restarting keeps its
// route in the router's kernel table throughout; one that does not come back is withdrawn when
// the restart time it announced ends.
func TestBGPGracefulRestartWithBird(t *testing.T) {
	rt, node, dir := routerAndNode(t, birdConf(false, true))
	a := serveArgs{RestartTime: 4 * time.Second}
	p := startSpeaker(t, node, a)
	waitUp(t, p, rt, a)

	start := time.Now()
	p.kill(syscall.SIGKILL)
	a.Restarting = true
	p2 := startSpeaker(t, node, a)
	if gone := routeGone(t, rt, start, 1500*time.Millisecond); gone >= 0 {
		t.Fatalf("the route left the router's kernel %s after the kill: graceful restart did not keep it", gone)
	}
	waitUp(t, p2, rt, a)
	// After End-of-RIB the route is fresh again (not stale), and still there.
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if len(kernelVia(t, rt, vip4)) == 0 {
			t.Fatalf("the route left the router after the restart")
		}
		if !grActive(t, dir) {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the route is still stale at the router 5 s after the restart: no End-of-RIB")
		}
	}
	t.Logf("restart: route kept throughout; fresh again %s after the kill", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	p2.kill(syscall.SIGKILL)
	gone := routeGone(t, rt, start, 10*time.Second)
	t.Logf("a speaker that does not come back: withdrawn %s after the kill (restart time %s)", gone, a.RestartTime)
	if gone < 3*time.Second || gone > 8*time.Second {
		t.Fatalf("withdrawn %s after the kill: want about the restart time, %s", gone, a.RestartTime)
	}
}

// grActive says whether bird still runs a graceful restart for the node (its routes are kept as
// stale until the node's End-of-RIB).
func grActive(t *testing.T, dir string) bool {
	t.Helper()
	out, err := exec.Command("birdc", "-s", bird.SocketPath(dir), "show", "protocols", "all", "node").CombinedOutput()
	if err != nil {
		t.Fatalf("birdc: %v: %s", err, out)
	}
	return strings.Contains(string(out), "graceful restart active")
}

// TestBGPGracefulRestartUnderBFD: bird 2's BFD shares nothing with the speaker's restart: with
// both on, a killed speaker's session enters graceful restart at the FIN, then bird's BFD session
// times out (GoBGP's BFD dies with the process) and bird ends the restart and withdraws the
// routes. The router withdraws within the BFD detection time, as for a hang (docs/fleet.md,
// "BFD or graceful restart").
func TestBGPGracefulRestartUnderBFD(t *testing.T) {
	rt, node, _ := routerAndNode(t, birdConf(true, true))
	a := serveArgs{RestartTime: 4 * time.Second, BFD: true}
	p := startSpeaker(t, node, a)
	waitUp(t, p, rt, a)
	start := time.Now()
	p.kill(syscall.SIGKILL)
	gone := routeGone(t, rt, start, 3*time.Second)
	t.Logf("kill to route withdrawn with BFD and graceful restart: %s", gone)
	if gone < 0 || gone > time.Second {
		t.Fatalf("route not withdrawn within 1 s of the kill: %s", gone)
	}
}
