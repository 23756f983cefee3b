package handover

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// serveControl answers the control socket until a successor takes it.
func (p *Process) serveControl() {
	for {
		c, err := p.ctl.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || p.handed.Load() {
				return
			}
			time.Sleep(50 * time.Millisecond) // out of descriptors: back off
			continue
		}
		p.connsMu.Lock()
		if p.closing {
			p.connsMu.Unlock()
			c.Close()
			return
		}
		p.conns.Add(1)
		p.connsMu.Unlock()
		go func() {
			defer p.conns.Done()
			p.serveConn(c)
		}()
	}
}

func (p *Process) serveConn(c *net.UnixConn) {
	defer c.Close()
	// The socket is owner-only already; the credential check also covers a looser directory.
	if cred, err := peer(c); err != nil || (cred.Uid != 0 && int(cred.Uid) != os.Geteuid()) {
		send(c, message{Op: "done", Error: "permission denied: only root or the stop's own user may upgrade it"}, nil)
		return
	}
	m, fs, err := recv(c, time.Now().Add(10*time.Second))
	closeFiles(fs)
	if err != nil {
		return
	}
	switch m.Op {
	case "upgrade":
		pid, err := p.Upgrade()
		send(c, message{Op: "done", PID: pid, Old: os.Getpid(), Error: errText(err)}, nil)
	case "take":
		err := p.handOver(c, m.PID)
		select {
		case p.results <- err: // a spawned successor: Upgrade reports it
		default:
		}
		if err != nil {
			p.opt.Log.Error("upgrade: the new process did not take over; this process keeps serving", "stop", p.opt.Stop, "new_pid", m.PID, "err", err)
		}
	default:
		send(c, message{Op: "done", Error: fmt.Sprintf("unknown control request %q", m.Op)}, nil)
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Upgrade starts the successor and waits until it serves (it returns its process id) or fails
// (the error says why; this process keeps serving and nothing changed).
func (p *Process) Upgrade() (int, error) {
	if p.ctl == nil {
		return 0, fmt.Errorf("upgrade %s: no control socket: run it with --control PATH", p.opt.Stop)
	}
	if p.handed.Load() {
		return 0, fmt.Errorf("upgrade %s: this process already handed over and is draining", p.opt.Stop)
	}
	if !p.upgrading.CompareAndSwap(false, true) {
		return 0, fmt.Errorf("upgrade %s: an upgrade is already in progress; try again when it ends", p.opt.Stop)
	}
	defer p.upgrading.Store(false)
	for len(p.results) > 0 { // a stale outcome of a manual take
		<-p.results
	}
	cmd := p.successorCommand()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("upgrade %s: start %s: %w", p.opt.Stop, p.exe, err)
	}
	pid := cmd.Process.Pid
	p.opt.Log.Info("upgrade: started the new process", "stop", p.opt.Stop, "binary", p.exe, "new_pid", pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var err error
	select {
	case err = <-p.results:
	case werr := <-exited:
		// A successor that fails reports why, then exits: on a loaded machine its exit can be
		// seen before the report is read, so give the report a moment to arrive.
		select {
		case err = <-p.results:
			if err == nil {
				err = fmt.Errorf("it exited right after taking over (%v); its log says why", werr)
			}
		case <-time.After(2 * time.Second):
			err = fmt.Errorf("it exited before taking over (%v); its log says why", werr)
		}
		exited <- werr
	case <-time.After(p.opt.Timeout + 5*time.Second):
		err = fmt.Errorf("it did not take over within %s", p.opt.Timeout)
	}
	if err == nil {
		return pid, nil
	}
	// The successor reported or timed out: make sure it is gone before the next attempt.
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-exited
	}
	return 0, fmt.Errorf("upgrade %s: new process %d failed, pid %d keeps serving: %w", p.opt.Stop, pid, os.Getpid(), err)
}

// handOver gives the successor at c every socket and, once it reports ready, lets go.
func (p *Process) handOver(c *net.UnixConn, pid int) error {
	if p.handed.Load() {
		send(c, message{Op: "done", Error: "this process already handed over; upgrade the new one"}, nil)
		return errors.New("already handed over")
	}
	names, fs, err := p.sockets.files()
	if err == nil {
		var cf *os.File
		if cf, err = p.ctl.File(); err == nil {
			names, fs = append(names, controlName), append(fs, cf)
		}
	}
	defer closeFiles(fs)
	if err != nil {
		send(c, message{Op: "done", Error: err.Error()}, nil)
		return err
	}
	for i := 0; i < len(fs) || i == 0; i += maxFDs {
		j := min(i+maxFDs, len(fs))
		if err := send(c, message{Op: "sockets", Names: names[i:j], More: j < len(fs)}, fs[i:j]); err != nil {
			return err
		}
	}
	closeFiles(fs)
	fs = nil
	m, more, err := recv(c, time.Now().Add(p.opt.Timeout))
	closeFiles(more)
	switch {
	case err != nil:
		return fmt.Errorf("it stopped before it was ready: %w", err)
	case m.Op == "fail":
		return errors.New(m.Error)
	case m.Op != "ready":
		return fmt.Errorf("unexpected message %q", m.Op)
	}
	// From here on the successor serves: stop answering the control socket and drain.
	p.handed.Store(true)
	p.ctl.Close()
	p.opt.Log.Info("upgrade: the new process serves; this one finishes its requests and exits", "stop", p.opt.Stop, "new_pid", pid)
	close(p.upgraded)
	if err := send(c, message{Op: "released"}, nil); err != nil {
		p.opt.Log.Warn("upgrade: tell the new process we let go", "err", err)
	}
	return nil
}

// Upgrade asks the process serving the control socket at path to upgrade itself, and returns
// the new process's id and the old one's (which drains and exits) once the new one serves.
func Upgrade(stop, path string, timeout time.Duration) (newPID, oldPID int, err error) {
	c, err := dialControl(path)
	var untrusted *untrustedError
	if errors.As(err, &untrusted) {
		return 0, 0, fmt.Errorf("upgrade %s: %w", stop, err)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("upgrade %s: connect to control socket %s: %w (is `switchyard %s run` running with --control %s, and are you root or its user?)", stop, path, err, stop, path)
	}
	defer c.Close()
	if err := send(c, message{Op: "upgrade"}, nil); err != nil {
		return 0, 0, err
	}
	m, fs, err := recv(c, time.Now().Add(timeout))
	closeFiles(fs)
	if err != nil {
		return 0, 0, fmt.Errorf("upgrade %s: wait for the answer: %w", stop, err)
	}
	if m.Error != "" {
		return 0, m.Old, errors.New(m.Error)
	}
	return m.PID, m.Old, nil
}
