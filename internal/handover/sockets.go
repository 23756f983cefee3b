// Package handover passes a running stop's listening sockets to its successor, so that a new
// binary (or the same one with a new configuration) takes over without refusing a connection or
// dropping a datagram: HAProxy's seamless reload, nginx's binary upgrade, Pingora's graceful
// upgrade. One implementation serves the L7, edge and DNS stops.
//
// The running process serves a control socket (a unix SOCK_SEQPACKET socket, owner-only).
// `switchyard <stop> upgrade`, systemctl reload and SIGUSR2 ask it to start the binary at its
// path again with SWITCHYARD_UPGRADE_FROM set; the successor connects, receives every listening
// socket by name over SCM_RIGHTS (and the control socket itself), builds its server on them and
// reports ready. Only then does the old process stop accepting, finish what it has in flight and
// exit. A successor that fails before ready (bad configuration, crash) reports or leaves, and
// the old process goes on serving as if nothing had happened.
package handover

import (
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
)

// Sockets is the set of listening sockets a process serves, by name: the ones it inherited from
// its predecessor (or from systemd) and the ones it opened, kept to pass on to its successor.
// A nil *Sockets listens anew and keeps nothing, so packages can use one code path.
type Sockets struct {
	mu        sync.Mutex
	inherited map[string][]*os.File // received, not yet taken
	activated []*os.File            // systemd socket activation, matched by local address
	kept      []kept                // served now, in the order opened
	upgrades  bool                  // a control socket: the process can hand over
}

type kept struct {
	name string
	raw  syscall.RawConn
}

// Name is the name of a socket: its network and the address the configuration asked for (not
// the bound one, so ":0" finds the same socket again in the successor).
func Name(network, address string) string { return network + " " + address }

// Listen returns the inherited stream listener named Name(network, address) or listens anew;
// either way the listener is kept to pass on.
func (s *Sockets) Listen(network, address string) (net.Listener, error) {
	if s == nil {
		return net.Listen(network, address)
	}
	name := Name(network, address)
	if fs := s.Take(name); len(fs) > 0 {
		ln, err := fileListener(fs)
		if err != nil {
			return nil, fmt.Errorf("take inherited %s: %w", name, err)
		}
		return ln, s.Keep(name, ln.(syscall.Conn))
	}
	if fs := s.takeActivated(network, address); len(fs) > 0 {
		ln, err := fileListener(fs)
		if err != nil {
			return nil, fmt.Errorf("take systemd socket for %s: %w", name, err)
		}
		return ln, s.Keep(name, ln.(syscall.Conn))
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return ln, s.Keep(name, ln.(syscall.Conn))
}

func fileListener(fs []*os.File) (net.Listener, error) {
	defer closeFiles(fs[1:]) // a listener is one socket; extra ones are not served
	defer fs[0].Close()      // net.FileListener holds its own duplicate
	return net.FileListener(fs[0])
}

// ListenUDP returns the inherited UDP sockets named Name("udp", address) (a SO_REUSEPORT group
// has several, all of which must be served) or binds them with bind; either way they are kept.
func (s *Sockets) ListenUDP(address string, bind func() ([]*net.UDPConn, error)) ([]*net.UDPConn, error) {
	name := Name("udp", address)
	var conns []*net.UDPConn
	fs := s.Take(name)
	if len(fs) == 0 && s != nil {
		fs = s.takeActivated("udp", address)
	}
	if len(fs) > 0 {
		for i, f := range fs {
			c, err := net.FilePacketConn(f)
			f.Close()
			uc, ok := c.(*net.UDPConn)
			if err != nil || !ok {
				closeFiles(fs[i+1:])
				for _, c := range conns {
					c.Close()
				}
				return nil, fmt.Errorf("take inherited %s: %v", name, errOr(err, "not a UDP socket"))
			}
			conns = append(conns, uc)
		}
	} else {
		var err error
		if conns, err = bind(); err != nil {
			return nil, err
		}
	}
	for _, c := range conns {
		if err := s.Keep(name, c); err != nil {
			return nil, err
		}
	}
	return conns, nil
}

func errOr(err error, msg string) string {
	if err != nil {
		return err.Error()
	}
	return msg
}

// Upgrades reports whether these sockets can pass to a successor (the process serves a control
// socket), for listeners that prepare for it.
func (s *Sockets) Upgrades() bool { return s != nil && s.upgrades }

// Take returns (and forgets) the inherited sockets under name; nil when there are none.
func (s *Sockets) Take(name string) []*os.File {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fs := s.inherited[name]
	delete(s.inherited, name)
	return fs
}

// Inherits reports whether sockets named name were inherited and not taken yet.
func (s *Sockets) Inherits(name string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inherited[name]) > 0
}

// Keep records a socket being served under name, to pass on at the next upgrade. Several
// sockets may share a name (a SO_REUSEPORT group).
func (s *Sockets) Keep(name string, c syscall.Conn) error {
	if s == nil {
		return nil
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("keep socket %s: %w", name, err)
	}
	s.mu.Lock()
	s.kept = append(s.kept, kept{name, raw})
	s.mu.Unlock()
	return nil
}

// CloseUnused closes the inherited sockets nobody took (a listener the new configuration no
// longer has) and returns their names.
func (s *Sockets) CloseUnused() []string {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for name, fs := range s.inherited {
		closeFiles(fs)
		names = append(names, name)
	}
	s.inherited = nil
	closeFiles(s.activated)
	s.activated = nil
	return names
}

// add records received sockets.
func (s *Sockets) add(name string, f *os.File) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inherited == nil {
		s.inherited = map[string][]*os.File{}
	}
	s.inherited[name] = append(s.inherited[name], f)
}

// files duplicates every kept socket for sending; the caller closes them.
func (s *Sockets) files() ([]string, []*os.File, error) {
	s.mu.Lock()
	ks := append([]kept(nil), s.kept...)
	s.mu.Unlock()
	var names []string
	var fs []*os.File
	for _, k := range ks {
		var nfd int
		var derr error
		if err := k.raw.Control(func(fd uintptr) { nfd, derr = dupCloexec(int(fd)) }); err != nil || derr != nil {
			closeFiles(fs)
			return nil, nil, fmt.Errorf("duplicate socket %s: %v", k.name, errOr(err, fmt.Sprint(derr)))
		}
		names = append(names, k.name)
		fs = append(fs, os.NewFile(uintptr(nfd), k.name))
	}
	return names, fs, nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
