package h3

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"

	"github.com/quic-go/quic-go"
	"github.com/switchyard/switchyard/internal/handover"
	"github.com/switchyard/switchyard/loader/quicsteer"
)

// QUIC across a hitless upgrade. A QUIC connection's state lives in the process that made it,
// so the old process must keep serving its connections while the new one takes new ones, both
// on one UDP address. Each generation binds its own socket into the address's SO_REUSEPORT
// group and issues connection IDs that name its generation (loader/quicsteer); the group's
// SK_REUSEPORT program sends each datagram to the generation its destination connection ID
// names, and the rest (new connections) to the newest. The program's maps pass to the successor
// with the sockets, under steerName. Without the program (no root or CAP_BPF, an old kernel, a
// predecessor that did not steer), the sockets themselves pass on as before: no request is
// dropped, but the old process's QUIC connections end at the upgrade.

// UDP is the UDP side of an HTTP/3 listener: its sockets and, when steered, this process's
// generation in the address's steering group.
type UDP struct {
	// Conns are the sockets to serve (a SO_REUSEPORT group may have several).
	Conns []net.PacketConn
	steer *quicsteer.Group
	gen   uint8
}

// steerName is the name the steering maps pass to the successor under.
func steerName(name string) string { return name + " quic-steer" }

// ListenUDP binds (or, in a hitless upgrade, inherits through sk) the UDP socket of a TLS
// listener's HTTP/3: the same address as its TCP listener tcp, configured as address (the name
// the socket passes to the next process under). When sk can hand over (a control socket), the
// socket is steered if the kernel lets this process load the program; log says when it cannot.
func ListenUDP(sk *handover.Sockets, address string, tcp *net.TCPAddr, log *slog.Logger) (*UDP, error) {
	if log == nil {
		log = slog.Default()
	}
	name := handover.Name("udp", address)
	if sk.Inherits(steerName(name)) {
		return inheritSteered(sk, name)
	}
	var g *quicsteer.Group
	switch {
	case !sk.Upgrades(): // no successor to keep connections for
	case sk.Inherits(name):
		log.Warn("http/3: QUIC connections will not survive an upgrade: the process this one replaces did not steer them (an older binary, or no BPF), and its socket passes on as it is; a restart of the stop steers them", "address", address)
	default:
		var err error
		if g, err = quicsteer.Load(); err != nil {
			log.Warn("http/3: QUIC connections will not survive an upgrade (the sockets still pass on): run as root or with CAP_BPF (CAP_SYS_ADMIN before Linux 5.8; under the shipped systemd units, a drop-in: docs/upgrades.md) on a kernel with SK_REUSEPORT programs (4.19+)", "address", address, "err", err)
		}
	}
	bound := false
	udp, err := sk.ListenUDP(address, func() ([]*net.UDPConn, error) {
		bound = true
		uc, err := bindUDP(&net.UDPAddr{IP: tcp.IP, Port: tcp.Port}, g != nil)
		if err != nil {
			return nil, fmt.Errorf("listen on udp %s: %w (HTTP/3 needs the TLS port free on UDP too)", net.JoinHostPort(tcp.IP.String(), strconv.Itoa(tcp.Port)), err)
		}
		return []*net.UDPConn{uc}, nil
	})
	if err != nil {
		if g != nil {
			g.Close()
		}
		return nil, err
	}
	u := &UDP{}
	for _, c := range udp {
		u.Conns = append(u.Conns, c)
	}
	if g != nil && !bound {
		log.Warn("http/3: QUIC connections will not survive an upgrade: the UDP socket came from systemd, not bound with SO_REUSEPORT here", "address", address)
		g.Close()
		g = nil
	}
	if g != nil {
		err := g.Attach(udp[0])
		if err == nil {
			err = startGroup(sk, name, g, 0, udp[0])
		}
		if err != nil {
			log.Warn("http/3: QUIC connections will not survive an upgrade", "address", address, "err", err)
			g.Close()
			g = nil
		}
	}
	u.steer = g
	return u, nil
}

// inheritSteered joins the predecessor's steering group with a socket of its own, as the next
// generation. The predecessor's sockets stay the predecessor's: it serves its connections on
// them while it drains. Any failure fails the upgrade (the old process keeps serving).
func inheritSteered(sk *handover.Sockets, name string) (*UDP, error) {
	fs := sk.Take(steerName(name))
	old := sk.Take(name)
	defer closeFiles(old)
	if len(fs) != 2 || len(old) == 0 {
		closeFiles(fs)
		return nil, fmt.Errorf("take inherited %s: got %d steering maps and %d sockets, want 2 and at least 1 (mismatched versions? upgrade with the same version first)", name, len(fs), len(old))
	}
	g, err := quicsteer.Open(fs[0], fs[1])
	if err != nil {
		return nil, fmt.Errorf("take inherited %s: %w", name, err)
	}
	addr, err := localUDP(old[0])
	var gen uint8
	if err == nil {
		gen, err = g.Next()
	}
	var uc *net.UDPConn
	if err == nil {
		uc, err = bindUDP(addr, true)
	}
	if err == nil {
		if err = startGroup(sk, name, g, gen, uc); err == nil {
			err = sk.Keep(name, uc)
		}
		if err != nil {
			uc.Close()
		}
	}
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("join the QUIC steering group of %s: %w", name, err)
	}
	return &UDP{Conns: []net.PacketConn{uc}, steer: g, gen: gen}, nil
}

// startGroup makes uc generation gen's socket and keeps the maps for the successor (the caller
// keeps uc).
func startGroup(sk *handover.Sockets, name string, g *quicsteer.Group, gen uint8, uc *net.UDPConn) error {
	if err := g.Add(gen, uc); err != nil {
		return err
	}
	socks, newest, err := g.Files()
	if err != nil {
		return err
	}
	// The files stay open (the kept list holds them) for every later upgrade of this process.
	return errors.Join(sk.Keep(steerName(name), socks), sk.Keep(steerName(name), newest))
}

// localUDP is the address an inherited UDP socket is bound to.
func localUDP(f *os.File) (*net.UDPAddr, error) {
	c, err := net.FilePacketConn(f)
	if err != nil {
		return nil, fmt.Errorf("read inherited socket address: %w", err)
	}
	defer c.Close()
	a, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok {
		return nil, fmt.Errorf("inherited socket is not UDP (%s)", c.LocalAddr())
	}
	return a, nil
}

// bindUDP binds a UDP socket on a, able to join a steering group when reuse.
func bindUDP(a *net.UDPAddr, reuse bool) (*net.UDPConn, error) {
	if reuse {
		return quicsteer.Bind(a)
	}
	return net.ListenUDP("udp", a)
}

// cidGen issues connection IDs that name generation gen (quic.ConnectionIDGenerator), led by
// the first bytes of inner's IDs (a balancer's server ID, internal/quiclb) when there is one.
type cidGen struct {
	inner quic.ConnectionIDGenerator
	gen   uint8
}

func (g cidGen) GenerateConnectionID() (quic.ConnectionID, error) {
	var prefix []byte
	if g.inner != nil {
		id, err := g.inner.GenerateConnectionID()
		if err != nil {
			return quic.ConnectionID{}, err
		}
		prefix = id.Bytes()
	}
	b, err := quicsteer.CID(g.gen, prefix)
	if err != nil {
		return quic.ConnectionID{}, err
	}
	return quic.ConnectionIDFromBytes(b), nil
}

func (g cidGen) ConnectionIDLen() int { return quicsteer.CIDLen }

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}
