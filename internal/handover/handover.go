package handover

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// EnvFrom names the environment variable (and the run commands' --upgrade-from flag) that tells
// a new process to take its sockets from the control socket of the process it replaces.
const EnvFrom = "SWITCHYARD_UPGRADE_FROM"

// controlName is the name the control socket itself is passed under.
const controlName = "control"

// Options configures a Process.
type Options struct {
	// Stop names the stop in messages ("l7", "edge", "dns").
	Stop string
	// Control is the path of the control socket; "" disables upgrades.
	Control string
	// From is the control socket of the process this one replaces ("" for a fresh start).
	From string
	// Timeout bounds how long a successor may take to become ready (default one minute).
	Timeout time.Duration
	// Log receives the upgrade's progress (default slog.Default()).
	Log *slog.Logger
}

// Process is one generation of a stop: the sockets it serves, its control socket, and its part
// in an upgrade (taking over from a predecessor, handing over to a successor).
type Process struct {
	opt     Options
	sockets *Sockets
	exe     string   // resolved at start: after a package upgrade /proc/self/exe names the old file
	args    []string // os.Args[1:], given to the successor unchanged

	pred     *net.UnixConn     // the predecessor, until Ready
	ctl      *net.UnixListener // nil without Control
	ctlOwned bool              // bound by this process (not inherited): removed at Close unless handed over

	upgrading atomic.Bool   // an upgrade or a take is in progress
	handed    atomic.Bool   // a successor is serving: this process drains and exits
	upgraded  chan struct{} // closed when handed
	readyOnce sync.Once
	closeOnce sync.Once
	results   chan error     // the outcome of the take a spawned successor makes
	conns     sync.WaitGroup // control connections being answered (Close waits for them)
	connsMu   sync.Mutex     // orders conns.Add against Close's Wait
	closing   bool
}

// Start begins a generation: with opt.From it takes the predecessor's sockets (and reports to it
// until Ready or Fail); otherwise it takes systemd's sockets if any and binds opt.Control.
// Listening goes through Sockets.
func Start(opt Options) (*Process, error) {
	if opt.Timeout <= 0 {
		opt.Timeout = time.Minute
	}
	if opt.Log == nil {
		opt.Log = slog.Default()
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable for upgrades: %w", err)
	}
	p := &Process{opt: opt, sockets: &Sockets{}, exe: exe, args: os.Args[1:], upgraded: make(chan struct{}), results: make(chan error, 1)}
	p.sockets.activated = activated()
	p.sockets.upgrades = opt.Control != "" || opt.From != ""
	if opt.From != "" {
		if err := p.takeOver(); err != nil {
			return nil, err
		}
		return p, nil
	}
	if opt.Control != "" {
		if p.ctl, err = bindControl(opt.Stop, opt.Control); err != nil {
			p.sockets.CloseUnused()
			return nil, err
		}
		p.ctlOwned = true
	}
	return p, nil
}

// Sockets returns the sockets to listen through.
func (p *Process) Sockets() *Sockets { return p.sockets }

// Upgraded is closed when a successor has taken over: stop accepting, finish, exit.
func (p *Process) Upgraded() <-chan struct{} { return p.upgraded }

// takeOver receives the predecessor's sockets.
func (p *Process) takeOver() error {
	c, err := dialControl(p.opt.From)
	var untrusted *untrustedError
	if errors.As(err, &untrusted) {
		return fmt.Errorf("upgrade from %s: %w", p.opt.From, err)
	}
	if err != nil {
		return fmt.Errorf("upgrade from %s: connect to the running process: %w (is it running with --control %s?)", p.opt.From, err, p.opt.From)
	}
	if err := send(c, message{Op: "take", PID: os.Getpid()}, nil); err != nil {
		c.Close()
		return fmt.Errorf("upgrade from %s: %w", p.opt.From, err)
	}
	deadline := time.Now().Add(p.opt.Timeout)
	for {
		m, fs, err := recv(c, deadline)
		if err == nil && m.Op != "sockets" {
			err = fmt.Errorf("%s", errOr(errors.New(m.Error), "unexpected answer "+m.Op))
		}
		if err == nil && len(fs) != len(m.Names) {
			err = fmt.Errorf("got %d descriptors for %d names", len(fs), len(m.Names))
		}
		if err != nil {
			closeFiles(fs)
			c.Close()
			p.sockets.CloseUnused()
			return fmt.Errorf("upgrade from %s: receive sockets: %w", p.opt.From, err)
		}
		for i, f := range fs {
			p.sockets.add(m.Names[i], f)
		}
		if !m.More {
			break
		}
	}
	p.pred = c
	if fs := p.sockets.Take(controlName); len(fs) > 0 {
		ln, err := net.FileListener(fs[0])
		closeFiles(fs)
		if err != nil {
			return p.Fail(fmt.Errorf("upgrade from %s: take the control socket: %w", p.opt.From, err))
		}
		p.ctl = ln.(*net.UnixListener)
		p.ctl.SetUnlinkOnClose(false)
	}
	p.opt.Log.Info("took over sockets from the running process", "stop", p.opt.Stop, "from", p.opt.From)
	return nil
}

// Ready says this process serves: the predecessor (if any) stops accepting and drains, the
// control socket starts answering, and systemd learns the new main process. Call it once every
// listener is served.
func (p *Process) Ready() error {
	var err error
	p.readyOnce.Do(func() {
		if unused := p.sockets.CloseUnused(); len(unused) > 0 {
			p.opt.Log.Info("closed inherited sockets the configuration no longer has", "sockets", strings.Join(unused, ", "))
		}
		if p.pred != nil {
			err = p.confirm()
		}
		if err != nil {
			return
		}
		if p.ctl == nil && p.opt.Control != "" { // the predecessor had none
			if p.ctl, err = bindControl(p.opt.Stop, p.opt.Control); err != nil {
				return
			}
			p.ctlOwned = true
		}
		notify(fmt.Sprintf("MAINPID=%d\nREADY=1", os.Getpid()))
		if p.ctl != nil {
			go p.serveControl()
			p.watchSignal()
		}
	})
	return err
}

// confirm tells the predecessor this process is ready and waits until it has let go.
func (p *Process) confirm() error {
	defer func() { p.pred.Close(); p.pred = nil }()
	if err := send(p.pred, message{Op: "ready", PID: os.Getpid()}, nil); err != nil {
		return fmt.Errorf("upgrade: tell the running process we are ready: %w", err)
	}
	m, fs, err := recv(p.pred, time.Now().Add(p.opt.Timeout))
	closeFiles(fs)
	if err != nil || m.Op != "released" {
		return fmt.Errorf("upgrade: the running process did not let go (%v %s); it keeps serving, this one stops", err, m.Error)
	}
	return nil
}

// Fail reports err to the predecessor, which keeps serving, and returns err.
func (p *Process) Fail(err error) error {
	if p != nil && p.pred != nil && err != nil {
		send(p.pred, message{Op: "fail", PID: os.Getpid(), Error: err.Error()}, nil)
		p.pred.Close()
		p.pred = nil
	}
	return err
}

// Close releases the control socket (removing its path unless a successor owns it now) and any
// socket not taken.
func (p *Process) Close() {
	p.closeOnce.Do(func() {
		if p.pred != nil {
			p.Fail(errors.New("the new process stopped before it was ready"))
		}
		if p.ctl != nil {
			p.ctl.Close() // never unlinks (set when bound or taken): the path may be a successor's
			if p.ctlOwned && !p.handed.Load() {
				os.Remove(p.opt.Control)
			}
		}
		p.sockets.CloseUnused()
		// The answer to the `upgrade` that replaced this process is still being sent.
		p.connsMu.Lock()
		p.closing = true
		p.connsMu.Unlock()
		done := make(chan struct{})
		go func() { p.conns.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
	})
}

// watchSignal makes SIGUSR2 start an upgrade, like `switchyard <stop> upgrade`.
func (p *Process) watchSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR2)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-p.upgraded:
				return
			case <-ch:
				if pid, err := p.Upgrade(); err != nil {
					p.opt.Log.Error("upgrade on SIGUSR2 failed; this process keeps serving", "err", err)
				} else {
					p.opt.Log.Info("upgraded on SIGUSR2", "new_pid", pid)
				}
			}
		}
	}()
}

// bindControl binds the owner-only control socket at path (refusing when a live process
// answers there; a stale file left by a crash is replaced).
func bindControl(stop, path string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create control socket directory: %w", err)
	}
	c, err := dialControl(path)
	var untrusted *untrustedError
	if errors.As(err, &untrusted) {
		// Someone else's process holds the path: replacing its file would race with it, and
		// its directory is not safe for a control socket anyway.
		return nil, fmt.Errorf("bind %s control socket: %w", stop, err)
	}
	if err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s is served by a running %s: upgrade it with `switchyard %s upgrade --control %s`, or stop it first", path, stop, stop, path)
	}
	// Bind under a temporary name, restrict it, then rename: the path never exists with looser
	// permissions.
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	os.Remove(tmp)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: tmp, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("listen on control socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("install control socket %s: %w", path, err)
	}
	return ln, nil
}

// successorCommand is the command that starts the new generation: the binary now at the path
// this one was started from, with the same arguments.
func (p *Process) successorCommand() *exec.Cmd {
	cmd := exec.Command(p.exe, p.args...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != EnvFrom && !strings.HasPrefix(k, "LISTEN_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, EnvFrom+"="+p.opt.Control)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	return cmd
}
