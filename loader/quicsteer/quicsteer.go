// Package quicsteer loads and drives bpf/quicsteer.c, the SK_REUSEPORT program that lets a
// QUIC server's process generations share one UDP address across a hitless upgrade: each
// generation holds one socket of the address's SO_REUSEPORT group and writes its generation into
// the connection IDs it issues (CID); the program sends each datagram to the socket of the
// generation its destination connection ID names, and new connections to the newest one. The
// maps pass from one generation to the next as descriptors (Files, Open), like the sockets.
package quicsteer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/switchyard/switchyard/loader/third_party/bpfobj"
	"golang.org/x/sys/unix"
)

// The connection ID layout the program reads (enum steer_cid of bpf/quicsteer.c).
const (
	// CIDLen is the length of every connection ID a steered server issues.
	CIDLen  = int(bpfobj.QuicsteerSteerCidSTEER_CID_LEN)
	genByte = int(bpfobj.QuicsteerSteerCidSTEER_CID_GEN)
	tagByte = int(bpfobj.QuicsteerSteerCidSTEER_CID_TAG)
	tag0    = byte(bpfobj.QuicsteerSteerCidSTEER_TAG0)
	tag1    = byte(bpfobj.QuicsteerSteerCidSTEER_TAG1)
	gens    = int(bpfobj.QuicsteerSteerCidSTEER_GENS)
)

// PrefixLen is how many leading bytes of a connection ID are free for another scheme's routing
// bytes (e.g. QUIC-LB's config rotation and server ID, internal/quiclb: at most five).
const PrefixLen = genByte

// CID returns a new connection ID of generation gen: prefix (at most PrefixLen bytes; longer is
// cut), random bytes up to the generation, the generation, and the tag the program checks.
// Without a prefix the first byte's top three bits are set: QUIC-LB's "unroutable" config
// rotation, so that an L4 balancer routing QUIC by server ID (docs/l4.md) reads none from it
// (with the Katran scheme it reads a random 32-bit ID, which names a backend about never) and
// keeps the client on its connection-table entry or Maglev.
func CID(gen uint8, prefix []byte) ([]byte, error) {
	b := make([]byte, CIDLen)
	if _, err := rand.Read(b[:genByte]); err != nil {
		return nil, fmt.Errorf("generate connection id: %w", err)
	}
	if len(prefix) == 0 {
		b[0] |= unroutable
	}
	copy(b[:genByte], prefix)
	b[genByte], b[tagByte], b[tagByte+1] = gen, tag0, tag1
	return b, nil
}

// unroutable is QUIC-LB's config rotation 0b111 in a connection ID's first byte.
const unroutable = 0b111 << 5

// generation returns the generation a connection ID names, and false when it is not a steered one.
func generation(cid []byte) (uint8, bool) {
	if len(cid) != CIDLen || cid[tagByte] != tag0 || cid[tagByte+1] != tag1 {
		return 0, false
	}
	return cid[genByte], true
}

// Bind binds a UDP socket on a that can join a's steering group (SO_REUSEPORT: every socket of
// the group needs it, set before bind, and the same user).
func Bind(a *net.UDPAddr) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) }); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", a.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// Group is the program state of one UDP address's reuseport group: which socket serves which
// generation, and which generation is the newest.
type Group struct {
	socks  *ebpf.Map
	newest *ebpf.Map
	prog   *ebpf.Program // nil when opened from a predecessor: the group has it already
}

// Load loads the program and fresh maps, for the first generation on an address.
func Load() (*Group, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("load quic steering program: %w", err)
	}
	var objs bpfobj.QuicsteerObjects
	if err := bpfobj.LoadQuicsteerObjects(&objs, nil); err != nil {
		return nil, fmt.Errorf("load quic steering program: %w", err)
	}
	return &Group{socks: objs.SteerSocks, newest: objs.SteerNewest, prog: objs.SteerQuic}, nil
}

// Open takes the maps a predecessor handed over (Files), owning the files.
func Open(socks, newest *os.File) (*Group, error) {
	defer socks.Close()
	defer newest.Close()
	s, err := ebpf.NewMapFromFD(dup(socks))
	if err != nil {
		return nil, fmt.Errorf("open inherited quic steering map: %w", err)
	}
	n, err := ebpf.NewMapFromFD(dup(newest))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("open inherited quic steering map: %w", err)
	}
	if s.Type() != ebpf.ReusePortSockArray || n.Type() != ebpf.Array {
		s.Close()
		n.Close()
		return nil, errors.New("open inherited quic steering maps: not the maps of bpf/quicsteer.c")
	}
	return &Group{socks: s, newest: n}, nil
}

// dup duplicates f's descriptor (-1 on failure, which NewMapFromFD refuses).
func dup(f *os.File) int {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
}

// Files duplicates the maps' descriptors for a successor (Open); the caller closes them.
func (g *Group) Files() (socks, newest *os.File, err error) {
	var fs []*os.File
	for _, m := range []*ebpf.Map{g.socks, g.newest} {
		fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range fs {
				f.Close()
			}
			return nil, nil, fmt.Errorf("duplicate quic steering map: %w", err)
		}
		fs = append(fs, os.NewFile(uintptr(fd), "quic-steer"))
	}
	return fs[0], fs[1], nil
}

// Attach makes the program choose the sockets of c's reuseport group (c must have SO_REUSEPORT
// and be bound). Only a group's first generation attaches.
func (g *Group) Attach(c syscall.Conn) error {
	if g.prog == nil {
		return errors.New("attach quic steering program: not loaded by this process")
	}
	return control(c, "attach quic steering program", func(fd int) error {
		return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_EBPF, g.prog.FD())
	})
}

// Add makes c (bound in the group) the socket of generation gen.
func (g *Group) Add(gen uint8, c syscall.Conn) error {
	return control(c, "add socket to quic steering", func(fd int) error {
		return g.socks.Update(uint32(gen), uint64(fd), ebpf.UpdateAny)
	})
}

// Next is the generation after the newest whose slot is free (a generation still draining keeps
// its slot).
func (g *Group) Next() (uint8, error) {
	n, err := g.Newest()
	if err != nil {
		return 0, err
	}
	for i := 1; i < gens; i++ {
		gen := uint8(int(n) + i)
		if !g.live(gen) {
			return gen, nil
		}
	}
	return 0, fmt.Errorf("quic steering: all %d generations hold a socket; wait for draining processes to exit", gens)
}

// Newest is the generation that takes new connections.
func (g *Group) Newest() (uint8, error) {
	var v uint32
	if err := g.newest.Lookup(uint32(0), &v); err != nil {
		return 0, fmt.Errorf("read newest quic generation: %w", err)
	}
	return uint8(v), nil
}

// SetNewest sends new connections to generation gen.
func (g *Group) SetNewest(gen uint8) error {
	if err := g.newest.Update(uint32(0), uint32(gen), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("set newest quic generation: %w", err)
	}
	return nil
}

// Superseded reports whether a newer generation than gen serves the group (so that gen's
// connections keep reaching it while it drains).
func (g *Group) Superseded(gen uint8) bool {
	n, err := g.Newest()
	return err == nil && n != gen && g.live(n)
}

// live reports whether generation gen has a socket in the group.
func (g *Group) live(gen uint8) bool {
	var cookie uint64
	return g.socks.Lookup(uint32(gen), &cookie) == nil
}

// Close releases this process's references to the program and maps (the group keeps the
// program; a socket leaves the map when it closes).
func (g *Group) Close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{g.socks, g.newest} {
		errs = append(errs, c.Close())
	}
	if g.prog != nil {
		errs = append(errs, g.prog.Close())
	}
	return errors.Join(errs...)
}

// control runs f on c's descriptor.
func control(c syscall.Conn, what string, f func(fd int) error) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var ferr error
	if err := raw.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if ferr != nil {
		return fmt.Errorf("%s: %w", what, ferr)
	}
	return nil
}
