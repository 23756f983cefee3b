package dns

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// helperEnv makes the test binary run one of the helper processes below instead of the tests:
// they lower their own descriptor limit, which must not happen to the test process itself.
const helperEnv = "SWITCHYARD_DNS_TEST_HELPER"

func TestHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		return
	case "rlimit":
		helperRlimit()
	case "accept":
		helperAccept()
	}
	os.Exit(0)
}

func helperServer() *Server {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv, err := NewServer(mustParse(conformanceZoneConfig()), Options{Logger: log})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if err := srv.Start(context.Background()); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	return srv
}

// helperRlimit lowers its soft descriptor limit, starts a server and prints the limits then.
func helperRlimit() {
	var r unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &r)
	r.Cur = 256
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &r); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	helperServer()
	unix.Getrlimit(unix.RLIMIT_NOFILE, &r)
	fmt.Println(r.Cur, r.Max)
}

// helperAccept starts a server, then lowers its descriptor limit (soft and hard) to a few above
// what it holds, prints the address and serves until stdin closes.
func helperAccept() {
	srv := helperServer()
	fds, _ := os.ReadDir("/proc/self/fd")
	limit := uint64(len(fds) + 4)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: limit, Max: limit}); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(srv.Addr().String())
	bufio.NewReader(os.Stdin).ReadString('\n')
}

func mustParse(yml string) *config.Config {
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		panic(err)
	}
	cfg.Listen = "127.0.0.1:0"
	return cfg
}

func conformanceZoneConfig() string {
	return "zones:\n  - origin: example.com.\n    records: [\"www A 192.0.2.1\"]\n"
}

// helper starts the test binary as the named helper process.
func helper(t *testing.T, name string) (*exec.Cmd, *bufio.Reader, *syncBuf) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the test binary
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuf{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.StopChild(cmd, stdin, 5*time.Second) })
	return cmd, bufio.NewReader(stdout), stderr
}

// The server raises its soft descriptor limit to the hard limit at start.
func TestStartRaisesDescriptorLimit(t *testing.T) {
	_, out, stderr := helper(t, "rlimit")
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, stderr.String())
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != f[1] {
		t.Fatalf("after start: soft/hard limit %q, want soft = hard (the helper set soft to 256)\n%s", line, stderr.String())
	}
	// The log reaches stderr before the limits reach stdout, but the two pipes are copied
	// separately: wait for it.
	testutil.Eventually(t, 5*time.Second, func() bool { return strings.Contains(stderr.String(), "raised descriptor limit") },
		"no log line for the raised limit:\n%s", func() any { return stderr.String() })
}

// cpuTicks returns the user+system CPU time of pid in clock ticks (1/100 s).
func cpuTicks(t *testing.T, pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}

// Out of descriptors, the TCP accept loop backs off and logs instead of spinning: a soak saw
// 83-106% of a core and no log line. The helper's limit leaves room for a few connections; the
// test opens many more, so accept fails with EMFILE for as long as they are held.
func TestAcceptBacksOffWhenOutOfDescriptors(t *testing.T) {
	cmd, out, stderr := helper(t, "accept")
	line, err := out.ReadString('\n')
	if err != nil || strings.HasPrefix(line, "error") {
		t.Fatalf("helper: %q %v\n%s", line, err, stderr.String())
	}
	addr := strings.TrimSpace(line)
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	for range 40 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	// The accepts fail as soon as the connections are queued; wait for the log line, or 3 s
	// without one (the old loop logged nothing: measure its CPU anyway).
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(stderr.String(), "accept failed") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	// CPU over 2 s while accept keeps failing (connections idle for 10 s before the server
	// closes them, so the descriptors stay taken).
	before := cpuTicks(t, cmd.Process.Pid)
	time.Sleep(2 * time.Second)
	used := cpuTicks(t, cmd.Process.Pid) - before
	if used > 40 { // 20% of one core over 2 s
		t.Errorf("server used %d ticks (1/100 s) of CPU in 2 s while out of descriptors: the accept loop spins", used)
	}
	if !strings.Contains(stderr.String(), "accept failed") {
		t.Errorf("no log line for the failing accepts:\n%s", stderr.String())
	}
	if n := strings.Count(stderr.String(), "accept failed"); n > 3 {
		t.Errorf("%d accept log lines in about 2 s; want them rate-limited:\n%s", n, stderr.String())
	}
	if !strings.Contains(stderr.String(), "too many open files") {
		t.Errorf("the log does not name the error:\n%s", stderr.String())
	}
}
