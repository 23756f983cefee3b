package handover

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envForeign makes the test binary a control socket server (TestForeignServerHelper) at the path
// it names: the process a hostile local user would run.
const envForeign = "HANDOVER_TEST_FOREIGN_SOCKET"

// TestForeignServerHelper is not a test: run as a child by TestRefuseForeignControlSocket, it
// listens at the control path and answers every request as a successful upgrade.
func TestForeignServerHelper(t *testing.T) {
	path := os.Getenv(envForeign)
	if path == "" {
		t.Skip("helper process only")
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	fmt.Println("listening")
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			os.Exit(1)
		}
		send(c, message{Op: "done", PID: 4242, Old: 1}, nil)
		send(c, message{Op: "sockets"}, nil)
		c.Close()
	}
}

// The clients (upgrade, --upgrade-from, and --control's check for a running process) refuse a
// control socket served by another unprivileged user, naming the path and its uid.
func TestRefuseForeignControlSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the foreign server as nobody")
	}
	const nobody = 65534
	// A directory nobody can reach and write in, holding a copy of this binary it may run (the
	// go build directory is owner-only).
	dir, err := os.MkdirTemp("", "handover-peercred")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "handover.test")
	if err := copyFile(self, bin); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "control.sock")
	cmd := exec.Command(bin, "-test.run=^TestForeignServerHelper$")
	cmd.Env = append(os.Environ(), envForeign+"="+path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a process as nobody here: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
		io.Copy(io.Discard, out)
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "listening" {
			t.Fatalf("foreign server: %q", s)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("foreign server did not start")
	}

	want := func(what string, err error) {
		t.Helper()
		var untrusted *untrustedError
		if err == nil || !errors.As(err, &untrusted) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("%s against a socket served by nobody: %v; want a refusal naming %s and uid 65534", what, err, path)
		}
	}
	pid, _, err := Upgrade("test", path, 5*time.Second)
	if pid == 4242 {
		t.Errorf("upgrade believed the foreign server's answer")
	}
	want("upgrade", err)
	_, err = Start(Options{Stop: "test", From: path, Timeout: 5 * time.Second})
	want("--upgrade-from", err)
	_, err = Start(Options{Stop: "test", Control: path})
	want("--control", err)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o755)
}
