package handover

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func start(t *testing.T, ctl, from string) *Process {
	t.Helper()
	p, err := Start(Options{Stop: "test", Control: ctl, From: from, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("start (from %q): %v", from, err)
	}
	t.Cleanup(p.Close)
	return p
}

func upgraded(p *Process) bool {
	select {
	case <-p.Upgraded():
		return true
	default:
		return false
	}
}

// A successor gets the very sockets (TCP and a UDP pair, by the configured names) and the
// control socket; the predecessor lets go only when the successor is ready.
func TestTakeOver(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "run", "test.sock")
	p1 := start(t, ctl, "")
	ln1, err := p1.Sockets().Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln1.Close()
	udp1, err := p1.Sockets().ListenUDP("127.0.0.1:0", func() ([]*net.UDPConn, error) {
		a, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, err
		}
		b, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		return []*net.UDPConn{a, b}, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p1.Ready(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(ctl); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("control socket: %v, mode %v; want 0600", err, st.Mode())
	}

	p2 := start(t, ctl, ctl)
	ln2, err := p2.Sockets().Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	if ln2.Addr().String() != ln1.Addr().String() {
		t.Fatalf("successor listens on %s; want the inherited %s", ln2.Addr(), ln1.Addr())
	}
	udp2, err := p2.Sockets().ListenUDP("127.0.0.1:0", func() ([]*net.UDPConn, error) { return nil, errors.New("bound anew; want inherited") })
	if err != nil {
		t.Fatal(err)
	}
	if len(udp2) != 2 || udp2[1].LocalAddr().String() != udp1[1].LocalAddr().String() {
		t.Fatalf("successor UDP sockets %v; want the two inherited ones", udp2)
	}
	if upgraded(p1) {
		t.Fatal("the predecessor let go before the successor was ready")
	}
	if err := p2.Ready(); err != nil {
		t.Fatal(err)
	}
	if !upgraded(p1) {
		t.Fatal("the predecessor was not told it is replaced")
	}
	// The old process closes its listener; the socket stays open and the successor accepts.
	ln1.Close()
	c, err := net.Dial("tcp", ln2.Addr().String())
	if err != nil {
		t.Fatalf("dial after the predecessor closed its listener: %v", err)
	}
	c.Close()
	if a, err := ln2.Accept(); err != nil {
		t.Fatal(err)
	} else {
		a.Close()
	}
	// A datagram to the shared UDP socket reaches the successor.
	udp1[1].Close()
	if _, err := udp2[0].WriteTo([]byte("q"), udp2[1].LocalAddr()); err != nil {
		t.Fatal(err)
	}
	udp2[1].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, _, err := udp2[1].ReadFrom(make([]byte, 8)); err != nil {
		t.Fatalf("successor reads the inherited UDP socket: %v", err)
	}

	// p2 now answers the control socket: a failing successor changes nothing, a good one takes over.
	p3 := start(t, ctl, ctl)
	if err := p3.Fail(errors.New("parse config: line 3: bad")); err == nil {
		t.Fatal("Fail returned nil")
	}
	time.Sleep(50 * time.Millisecond)
	if upgraded(p2) {
		t.Fatal("a failed successor replaced the running process")
	}
	p4 := start(t, ctl, ctl)
	if _, err := p4.Sockets().Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := p4.Ready(); err != nil {
		t.Fatalf("a good successor after a failed one: %v", err)
	}
	if !upgraded(p2) {
		t.Fatal("p2 was not replaced by p4")
	}
}

// A running process refuses a second one on its control socket; a stale socket file is replaced.
func TestControlSocketExclusive(t *testing.T) {
	ctl := filepath.Join(t.TempDir(), "test.sock")
	p := start(t, ctl, "")
	if err := p.Ready(); err != nil {
		t.Fatal(err)
	}
	if _, err := Start(Options{Stop: "test", Control: ctl}); err == nil || !strings.Contains(err.Error(), "switchyard test upgrade --control") {
		t.Fatalf("second process on a live control socket: %v; want a refusal naming the upgrade command", err)
	}
	p.Close()
	if _, err := os.Stat(ctl); !os.IsNotExist(err) {
		t.Fatalf("control socket left after Close: %v", err)
	}
	// A file left by a crash (nobody answers): the next start replaces it.
	stale, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: ctl, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	stale.Close()
	start(t, ctl, "")
}

// Upgrade without a control socket, and the client against nothing, say what to do.
func TestUpgradeErrors(t *testing.T) {
	p := start(t, "", "")
	if _, err := p.Upgrade(); err == nil || !strings.Contains(err.Error(), "--control") {
		t.Fatalf("upgrade without a control socket: %v", err)
	}
	if _, _, err := Upgrade("test", filepath.Join(t.TempDir(), "none.sock"), time.Second); err == nil || !strings.Contains(err.Error(), "--control") {
		t.Fatalf("upgrade client without a server: %v", err)
	}
	if _, err := Start(Options{Stop: "test", From: filepath.Join(t.TempDir(), "none.sock")}); err == nil {
		t.Fatal("take over from nothing succeeded")
	}
}

// Ready tells systemd the main process and readiness (Type=notify, NotifyAccess=all).
func TestNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	p := start(t, "", "")
	if err := p.Ready(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 256)
	n, err := c.Read(b)
	if err != nil || !strings.Contains(string(b[:n]), "READY=1") || !strings.Contains(string(b[:n]), "MAINPID=") {
		t.Fatalf("notification %q, %v; want MAINPID and READY=1", b[:n], err)
	}
}

// A socket systemd passed (LISTEN_FDS) serves the listener configured on its address.
func TestSystemdSocketMatchesAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	other, _ := net.Listen("tcp", "127.0.0.1:0")
	defer other.Close()
	f, _ := ln.(*net.TCPListener).File()
	g, _ := other.(*net.TCPListener).File()
	s := &Sockets{activated: []*os.File{g, f}}
	got, err := s.Listen("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer got.Close()
	if got.Addr().String() != ln.Addr().String() || len(s.activated) != 1 {
		t.Fatalf("took %s (%d left); want the passed socket on %s", got.Addr(), len(s.activated), ln.Addr())
	}
	if unused := s.CloseUnused(); len(unused) != 0 || s.activated != nil {
		t.Fatalf("CloseUnused: %v, %v", unused, s.activated)
	}
}
