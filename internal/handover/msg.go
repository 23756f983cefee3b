package handover

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// message is one SOCK_SEQPACKET datagram of the control protocol (JSON, fds as SCM_RIGHTS).
type message struct {
	Op    string   `json:"op"`              // upgrade, take, sockets, ready, fail, released, done
	PID   int      `json:"pid,omitempty"`   // the sender's process (take, ready, done)
	Names []string `json:"names,omitempty"` // sockets: the names of the attached descriptors
	More  bool     `json:"more,omitempty"`  // sockets: another batch follows
	Error string   `json:"error,omitempty"` // fail, done
	Old   int      `json:"old,omitempty"`   // done: the process now draining
}

// maxFDs is how many descriptors go in one message (the kernel's SCM_MAX_FD is 253).
const maxFDs = 200

func send(c *net.UnixConn, m message, fs []*os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode control message: %w", err)
	}
	var oob []byte
	if len(fs) > 0 {
		fds := make([]int, len(fs))
		for i, f := range fs {
			fds[i] = rawFD(f)
		}
		oob = unix.UnixRights(fds...)
	}
	if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
		return fmt.Errorf("send control message %s: %w", m.Op, err)
	}
	return nil
}

// recv reads one message and the descriptors attached to it, waiting until deadline.
func recv(c *net.UnixConn, deadline time.Time) (message, []*os.File, error) {
	var m message
	c.SetReadDeadline(deadline)
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return m, nil, err
	}
	var fs []*os.File
	if oobn > 0 {
		scms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return m, nil, fmt.Errorf("parse control message: %w", err)
		}
		for _, scm := range scms {
			fds, err := unix.ParseUnixRights(&scm)
			if err != nil {
				continue
			}
			for _, fd := range fds {
				unix.CloseOnExec(fd)
				fs = append(fs, os.NewFile(uintptr(fd), "inherited"))
			}
		}
	}
	if n == 0 {
		closeFiles(fs)
		return m, nil, fmt.Errorf("read control message: peer closed the connection")
	}
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeFiles(fs)
		return m, nil, fmt.Errorf("decode control message: %w", err)
	}
	return m, fs, nil
}

// peer returns the credentials of the process at the other end.
func peer(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	return cred, cerr
}

// dialControl connects to the control socket at path and checks who serves it: only root or
// this process's own user may. A control socket lives in a directory someone else may have been
// able to write to first; without the check a local user listening there could fake an
// "upgraded" answer, block `run --control`, or hand --upgrade-from sockets of its own.
func dialControl(path string) (*net.UnixConn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	cred, err := peer(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("read the credentials of the process serving control socket %s: %w", path, err)
	}
	if !trustedUID(cred.Uid) {
		c.Close()
		return nil, &untrustedError{path: path, uid: cred.Uid, pid: cred.Pid}
	}
	return c, nil
}

// trustedUID reports whether a control socket served by uid may be trusted: root, or this
// process's own user.
func trustedUID(uid uint32) bool { return uid == 0 || int(uid) == os.Geteuid() }

// untrustedError is a control socket served by a process of another, unprivileged user.
type untrustedError struct {
	path string
	uid  uint32
	pid  int32
}

func (e *untrustedError) Error() string {
	return fmt.Sprintf("refuse control socket %s: it is served by uid %d (pid %d), neither root nor this user (uid %d); "+
		"stop that process, remove the socket and keep its directory writable only by root or the stop's user", e.path, e.uid, e.pid, os.Geteuid())
}

func dupCloexec(fd int) (int, error) { return unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) }

// rawFD is f's descriptor. os.File.Fd would switch the socket, shared with the server still
// using it, to blocking mode.
func rawFD(f *os.File) int {
	fd := -1
	if rc, err := f.SyscallConn(); err == nil {
		rc.Control(func(u uintptr) { fd = int(u) })
	}
	return fd
}
