package health

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/switchyard/switchyard/dns/config"
)

const helperEnv = "SWITCHYARD_HEALTH_TEST_HELPER"

// TestHelperProcess is the child of TestLocalFailureIsNotTargetFailure: it lowers its own
// descriptor limit, which must not happen to the test process.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) == "" {
		return
	}
	helperOutOfDescriptors()
	os.Exit(0)
}

// helperOutOfDescriptors probes healthy TCP and HTTP targets with no descriptor left for the
// probes' sockets and prints the targets' state and the local error count.
func helperOutOfDescriptors() {
	// The targets run in the parent: here every descriptor must be one the probes cannot use.
	tcpTarget, httpTarget := os.Getenv("TCP_TARGET"), os.Getenv("HTTP_TARGET")
	chk := func(typ, target string) config.Check {
		return config.Check{Type: typ, Target: target, Path: "/", Timeout: config.Duration(500 * time.Millisecond),
			Interval: config.Duration(time.Second), Rise: 1, Fall: 1}
	}
	var mu sync.Mutex
	var local []string
	c := New(map[string]config.Check{"n/tcp": chk("tcp", tcpTarget), "n/http": chk("http", httpTarget)}, nil, nil)
	c.OnLocalError = func(key string, err error) {
		mu.Lock()
		local = append(local, err.Error())
		mu.Unlock()
	}
	// The runtime opens its epoll descriptor lazily, on the first timer or network poll: open it
	// now, or the limit below leaves it none and the runtime dies (netpollinit failed).
	if l, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		l.Close()
	}
	time.Sleep(time.Millisecond)
	// The limit caps descriptor numbers, not their count: cap it at the highest one open and fill
	// every hole below, so the probes find none free.
	fds, _ := os.ReadDir("/proc/self/fd")
	var highest uint64
	for _, fd := range fds {
		if n, err := strconv.ParseUint(fd.Name(), 10, 32); err == nil && n > highest {
			highest = n
		}
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: highest + 1, Max: highest + 1}); err != nil {
		fmt.Println("error", err)
		return
	}
	for {
		if _, err := unix.Dup(0); err != nil {
			break
		}
	}
	for range 3 {
		c.Round(context.Background())
	}
	fmt.Printf("tcp_up=%v http_up=%v local=%d\n", c.Up("n/tcp"), c.Up("n/http"), c.LocalErrors())
	if len(local) > 0 {
		fmt.Println(local[0])
	}
}

// A probe that fails because this process is out of descriptors says nothing about the target:
// with fall 1, counting it would take two healthy targets down (a soak failed them over for 18 s).
func TestLocalFailureIsNotTargetFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer hs.Close()
	// Both targets are healthy: the parent probes them once to prove it.
	for _, chk := range []config.Check{{Type: "tcp", Target: ln.Addr().String()}, {Type: "http", Target: hs.Listener.Addr().String(), Path: "/"}} {
		if _, err := Probe(context.Background(), nil, chk); err != nil {
			t.Fatalf("target not healthy: %v", err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1", "TCP_TARGET="+ln.Addr().String(), "HTTP_TARGET="+hs.Listener.Addr().String())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "tcp_up=true http_up=true local=6") {
		t.Errorf("want both targets up and 6 local errors (2 targets x 3 rounds):\n%s", s)
	}
	if !strings.Contains(s, "too many open files") {
		t.Errorf("the local error is not EMFILE:\n%s", s)
	}
}

func TestIsLocal(t *testing.T) {
	_, err := net.DialTimeout("tcp", "127.0.0.1:1", time.Second) // refused: the target's answer
	if err == nil || IsLocal(err) {
		t.Fatalf("connection refused counted as local: %v", err)
	}
	if !IsLocal(&net.OpError{Op: "dial", Err: os.NewSyscallError("socket", unix.EMFILE)}) {
		t.Fatal("EMFILE not local")
	}
}
