package lab

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
)

// Proc is a process the lab started inside a namespace.
type Proc struct {
	Name string   `json:"name"`
	NS   string   `json:"ns"`
	Argv []string `json:"argv"`
	PID  int      `json:"pid"`
	Log  string   `json:"log"`
}

// StartProcess starts argv inside namespace ns ("": the host's) as a detached process (its own
// session, so that it outlives `lab up`), logging to <state dir>/<name>.log and recording its
// pid in <name>.pid.
//
// It enters the namespace with `nsenter --net=/run/netns/NS`, not `ip netns exec`: the latter
// also remounts /sys, which hides /sys/fs/bpf, and then pins made inside would not outlive the
// process.
func StartProcess(prefix, name, ns string, argv ...string) (Proc, error) {
	return StartProcessEnv(prefix, name, ns, nil, argv...)
}

// StartProcessEnv is StartProcess with env (NAME=VALUE) added to the environment.
func StartProcessEnv(prefix, name, ns string, env []string, argv ...string) (Proc, error) {
	dir := StateDir(prefix)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Proc{}, fmt.Errorf("create lab state directory: %w", err)
	}
	p := Proc{Name: name, NS: ns, Argv: argv, Log: filepath.Join(dir, name+".log")}
	if old, ok := readPID(dir, name); ok && alive(old, argv[0]) {
		p.PID = old // already running: up is idempotent
		return p, nil
	}
	logf, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return Proc{}, fmt.Errorf("open log %s: %w", p.Log, err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", append([]string{"--net=" + namednetns.Path(ns), "--"}, argv...)...)
	if ns == "" { // the host namespace: the lab's web view and Prometheus (observe.go)
		cmd = exec.Command(argv[0], argv[1:]...)
	}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return Proc{}, fmt.Errorf("start %s in %s: %w (is nsenter installed? it is in util-linux)", name, ns, err)
	}
	p.PID = cmd.Process.Pid
	// Reap it in the background when this process lives on (tests); a CLI exits first and the
	// process is re-parented.
	go cmd.Wait()
	if err := os.WriteFile(filepath.Join(dir, name+".pid"), []byte(strconv.Itoa(p.PID)), 0o600); err != nil {
		return p, fmt.Errorf("write pid file: %w", err)
	}
	return p, nil
}

func readPID(dir, name string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid, err == nil && pid > 0
}

// alive reports whether pid runs the program exe: a pid file that outlived its process may
// name an unrelated process by now, which must never be signalled.
func alive(pid int, exe string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := bytes.Split(b, []byte{0})
	if len(args) == 0 {
		return false
	}
	// nsenter execs the program, so the command line is the program's own.
	return filepath.Base(string(args[0])) == filepath.Base(exe) || string(args[0]) == "nsenter"
}

// Running lists the processes recorded for a lab and whether each still runs.
func Running(prefix string) (map[string]int, error) {
	dir := StateDir(prefix)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lab state: %w", err)
	}
	out := map[string]int{}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".pid")
		if !ok {
			continue
		}
		pid, ok := readPID(dir, name)
		if !ok {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			out[name] = pid
		} else {
			out[name] = 0
		}
	}
	return out, nil
}

// StopProcess ends one recorded process: SIGTERM, then SIGKILL after a grace period.
func StopProcess(prefix, name string, grace time.Duration) error {
	dir := StateDir(prefix)
	pid, ok := readPID(dir, name)
	if !ok {
		return nil
	}
	defer os.Remove(filepath.Join(dir, name+".pid"))
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return nil
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !exists(pid) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s (pid %d): %w", name, pid, err)
	}
	// A killed process's sockets close as it exits, a moment after the signal: wait for that, so
	// a successor started next does not find it still answering on its socket.
	for end := time.Now().Add(2 * time.Second); exists(pid) && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// exists is true while pid is a process that is not a zombie.
func exists(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses: "pid (comm) S ...".
	if i := bytes.LastIndexByte(b, ')'); i > 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

// StopProcesses ends every process recorded for the lab.
func StopProcesses(prefix string) error {
	procs, err := Running(prefix)
	if err != nil {
		return err
	}
	var errs []error
	for name := range procs {
		errs = append(errs, StopProcess(prefix, name, 5*time.Second))
	}
	return errors.Join(errs...)
}
