package bgp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/internal/testutil"
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
	BFDFailures     uint64
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
	s.Set(plain(vip4))
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
			st.BFD, st.BFDFailures = ss[0].BFD.State, ss[0].BFD.Failures
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
	switch sig {
	case syscall.SIGKILL:
		_ = p.cmd.Process.Signal(syscall.SIGCONT)
		_, _ = p.cmd.Process.Wait()
	case syscall.SIGSTOP:
		waitStopped(p.cmd.Process.Pid)
	}
}

// waitStopped waits (up to a second) until every thread of pid is stopped: a signal is delivered
// asynchronously, and a speaker still running for a moment after SIGSTOP answers what the test
// sends next (it once took bird's BFD Down and reset the session itself).
func waitStopped(pid int) {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		stopped := len(tasks) > 0
		for _, f := range tasks {
			b, err := os.ReadFile(f)
			// The state is the field after the command's closing parenthesis.
			if i := bytes.LastIndexByte(b, ')'); err != nil || i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped {
			return
		}
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
	// The speaker runs again: BFD and the session come back, and so does the route.
	start = time.Now()
	p.kill(syscall.SIGCONT)
	waitUp(t, p, rt, a)
	t.Logf("SIGCONT to route back: %s", time.Since(start).Round(time.Millisecond))
	if f := p.status().BFDFailures; f == 0 {
		t.Errorf("BFD failures reported after the expiry: %d, want at least 1", f)
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

// TestBGPBirdTakesAdminDownAsFailure pins why a planned restart cannot keep its routes under
// BFD at a bird2 router (docs/fleet.md, "BFD or graceful restart"): RFC 5882 section 3.2 says a
// session the peer moves to AdminDown is no connectivity failure, but bird 2.0.12 ends the BGP
// session on it as on a timeout. The speaker is stopped first (SIGSTOP: no FIN, and GoBGP cannot
// answer bird's Down, which v4.8.0 would take as a failure too), then a valid AdminDown (the
// session's own discriminators, read from bird's packets) reaches bird; the route leaves its
// kernel at once. If a future bird keeps the route, this fails: revisit the docs and send AdminDown
// before a planned restart.
func TestBGPBirdTakesAdminDownAsFailure(t *testing.T) {
	rt, node, dir := routerAndNode(t, birdConf(true, true))
	a := serveArgs{RestartTime: 4 * time.Second, BFD: true}
	p := startSpeaker(t, node, a)
	waitUp(t, p, rt, a)
	testutil.DoNamed(t, node, func() error {
		ours, birds, err := bfdDiscriminators()
		if err != nil {
			return err
		}
		p.kill(syscall.SIGSTOP)
		return sendAdminDown(ours, birds)
	})
	start := time.Now()
	gone := routeGone(t, rt, start, 2*time.Second)
	out, _ := exec.Command("birdc", "-s", bird.SocketPath(dir), "show", "protocols", "node").CombinedOutput()
	t.Logf("AdminDown to route withdrawn (speaker stopped, graceful restart negotiated): %s; bird: %s", gone, out)
	if gone < 0 {
		t.Fatalf("bird kept the route after a BFD AdminDown: it now follows RFC 5882 3.2; send AdminDown on a planned restart")
	}
	if !strings.Contains(string(out), "BFD session down") {
		t.Fatalf("bird withdrew for another reason than BFD: %s", out)
	}
}

// bfdDiscriminators reads one of bird's BFD packets off the node's interface (a raw socket gets
// a copy of every UDP datagram) and returns the session's discriminators: GoBGP v4.8.0 does not
// report them.
func bfdDiscriminators() (ours, birds uint32, err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_UDP)
	if err != nil {
		return 0, 0, fmt.Errorf("raw socket: %w", err)
	}
	defer syscall.Close(fd)
	tv := syscall.NsecToTimeval(int64(2 * time.Second))
	if err := syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv); err != nil {
		return 0, 0, err
	}
	buf := make([]byte, 1500)
	for {
		n, _, err := syscall.Recvfrom(fd, buf, 0)
		if err != nil {
			return 0, 0, fmt.Errorf("read a BFD packet: %w", err)
		}
		udp := buf[int(buf[0]&0xf)*4 : n]
		if len(udp) >= 8+24 && binary.BigEndian.Uint16(udp[2:]) == BFDPort && udp[8+1]>>6 == 3 { // Up
			return binary.BigEndian.Uint32(udp[8+8:]), binary.BigEndian.Uint32(udp[8+4:]), nil
		}
	}
}

// sendAdminDown sends three control packets in state AdminDown, diagnostic 7 (administratively
// down), with TTL 255 (RFC 5881).
func sendAdminDown(ours, birds uint32) error {
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: routerAddr4.AsSlice(), Port: BFDPort})
	if err != nil {
		return err
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_TTL, 255)
	}); err != nil || serr != nil {
		return errors.Join(err, serr)
	}
	b := make([]byte, 24)
	b[0], b[1], b[2], b[3] = 1<<5|7, 0, 3, 24 // version 1, diag 7; state AdminDown; mult 3; length
	binary.BigEndian.PutUint32(b[4:], ours)
	binary.BigEndian.PutUint32(b[8:], birds)
	binary.BigEndian.PutUint32(b[12:], 1_000_000)
	binary.BigEndian.PutUint32(b[16:], 1_000_000)
	for range 3 {
		if _, err := c.Write(b); err != nil {
			return err
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// TestBGPGracefulRestartNodeWithoutBFD: the per-node choice. The router keeps one configuration
// for every node (bfd on, graceful restart on); a node that runs no BFD never brings the router's
// BFD session up, so nothing ends its graceful restart: killed and started again, it keeps its
// route in the router's kernel throughout.
func TestBGPGracefulRestartNodeWithoutBFD(t *testing.T) {
	rt, node, _ := routerAndNode(t, birdConf(true, true))
	a := serveArgs{RestartTime: 4 * time.Second}
	p := startSpeaker(t, node, a)
	waitUp(t, p, rt, a)
	start := time.Now()
	p.kill(syscall.SIGKILL)
	a.Restarting = true
	p2 := startSpeaker(t, node, a)
	if gone := routeGone(t, rt, start, 1500*time.Millisecond); gone >= 0 {
		t.Fatalf("the route left the router's kernel %s after the kill: a bfd-on router ended the restart of a node without BFD", gone)
	}
	waitUp(t, p2, rt, a)
	if len(kernelVia(t, rt, vip4)) == 0 {
		t.Fatal("the route left the router after the restart")
	}
	t.Logf("node without BFD at a bfd-on router: route kept through the restart, back up %s after the kill", time.Since(start).Round(time.Millisecond))
}
