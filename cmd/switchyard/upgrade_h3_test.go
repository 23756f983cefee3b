package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/loader/quicsteer"
)

// HTTP/3 across an upgrade (docs/upgrades.md, "HTTP/3 across an upgrade"), on the edge and on
// L7: a QUIC connection the old process serves goes on making requests after the upgrade on the
// same connection (no new handshake), a new connection reaches the new process, and the old
// process exits as soon as its last connection ends.
func testUpgradeHTTP3(t *testing.T, built string) {
	if os.Geteuid() != 0 {
		t.Skip("QUIC connections survive an upgrade through an SK_REUSEPORT program: needs root (or CAP_BPF)")
	}
	g, err := quicsteer.Load()
	if err != nil {
		t.Skipf("QUIC connections survive an upgrade through an SK_REUSEPORT program, which this kernel refuses: %v", err)
	}
	g.Close()
	dir := t.TempDir()
	bin := copyBinary(t, built, dir)
	cp, kp, pool := selfSigned(t, dir)
	origin := upgradeOriginOn(t, freePort(t))
	edgeTLS, l7TLS := freePort(t), freePort(t)
	cfgs := map[string]string{
		"edge": fmt.Sprintf("listen: %s\norigin: http://%s\ntls: {listen: %q, http3: true, certificates: [{cert: %q, key: %q}]}\n",
			freePort(t), origin, edgeTLS, cp, kp),
		"l7": l7H3Config(l7TLS, cp, kp, origin, ""),
	}
	for _, stop := range []string{"edge", "l7"} {
		t.Run(stop, func(t *testing.T) {
			url := "https://" + map[string]string{"edge": edgeTLS, "l7": l7TLS}[stop] + "/n/"
			path := filepath.Join(dir, stop+".yaml")
			os.WriteFile(path, []byte(cfgs[stop]), 0o600)
			p := startStopProc(t, bin, dir, stop, "--config", path)
			p.waitLog(t, map[string]string{"edge": `edge listening on`, "l7": `"l7 http/3 listening"`}[stop])
			old := newH3Client(t, pool)
			old.get(t, url+"before")

			pid, out, err := upgradeStop(t, bin, stop, p.ctl)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			p.waitLog(t, `a new process takes new connections; serving the open ones`)
			for i := range 5 {
				old.get(t, fmt.Sprintf("%safter-%d", url, i))
			}
			old.sameConn(t, "after the upgrade")
			select {
			case <-p.done:
				t.Fatalf("the old process exited (%v) while a QUIC connection of its was open", p.err)
			default:
			}

			fresh := newH3Client(t, pool)
			fresh.get(t, url+"new")
			old.tr.Close() // the old process's last connection ends
			select {
			case <-p.done:
				if p.err != nil {
					t.Errorf("the old process ended with %v; want a clean exit", p.err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the old process did not exit within 20 s of its last QUIC connection's end")
			}
			// The new connection was the new process's: it outlives the old process.
			fresh.get(t, url+"after-old-exit")
			fresh.sameConn(t, "after the old process exited")

			// Once more: the new process hands its socket and the maps on in turn.
			if _, out, err := upgradeStop(t, bin, stop, p.ctl); err != nil {
				t.Fatalf("second upgrade: %v\n%s", err, out)
			}
			fresh.get(t, url+"after-second-upgrade")
			fresh.sameConn(t, "after the second upgrade")
			newest := newH3Client(t, pool)
			newest.get(t, url+"newest")
			fresh.tr.Close()
			testutil.Eventually(t, 20*time.Second, func() bool { return syscall.Kill(pid, 0) != nil },
				"the second process (%d) did not exit within 20 s of its last QUIC connection's end", pid)
			newest.get(t, url+"newest-again")
			newest.sameConn(t, "after the second process exited")
		})
	}
	lh := l7H3{built: built, pool: pool, origin: origin, cert: cp, key: kp}
	t.Run("l7-drain-timeout", func(t *testing.T) { testUpgradeHTTP3DrainTimeout(t, lh) })
	t.Run("l7-without-bpf", func(t *testing.T) { testUpgradeHTTP3WithoutBPF(t, lh) })
	t.Run("l7-unit-capabilities", func(t *testing.T) { testUpgradeHTTP3UnitCapabilities(t, lh) })
}

// The shipped edge and L7 units run the stop as a dynamic user with CAP_NET_BIND_SERVICE and
// CAP_BPF alone (deploy/systemd): with exactly those, as a user other than root and with no new
// privileges, the steering program loads and a QUIC connection of the old process survives an
// upgrade.
func testUpgradeHTTP3UnitCapabilities(t *testing.T, lh l7H3) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux) to run as the unit does")
	}
	const nobody = 65534
	// The user reaches the certificate, the binary and its directory (where it makes its
	// control socket) through the tests' private directories.
	reach := func(dir string) {
		for d := dir; d != filepath.Dir(d) && d != filepath.Clean(os.TempDir()); d = filepath.Dir(d) {
			if fi, err := os.Stat(d); err == nil {
				os.Chmod(d, fi.Mode().Perm()|0o011)
			}
		}
	}
	certs := t.TempDir()
	reach(certs)
	unit := lh
	for _, f := range []*string{&unit.cert, &unit.key} {
		b, err := os.ReadFile(*f)
		if err != nil {
			t.Fatal(err)
		}
		*f = filepath.Join(certs, filepath.Base(*f))
		os.WriteFile(*f, b, 0o600)
		os.Chown(*f, nobody, nobody)
	}
	p, bin, addr := unit.start(t, "", func(dir, bin string) string {
		reach(dir)
		run := filepath.Join(dir, "switchyard-unit")
		os.WriteFile(run, []byte(fmt.Sprintf("#!/bin/sh\nchown -R %d:%d %s\nexec setpriv --reuid=%d --regid=%d --clear-groups --no-new-privs "+
			"--inh-caps=-all,+bpf,+net_bind_service --ambient-caps=-all,+bpf,+net_bind_service --bounding-set=-all,+bpf,+net_bind_service -- %s \"$@\"\n",
			nobody, nobody, dir, nobody, nobody, bin)), 0o755)
		return run
	})
	if b, _ := os.ReadFile(p.log); strings.Contains(string(b), "will not survive an upgrade") {
		t.Fatalf("the stop cannot steer with the unit's capabilities:\n%s", b)
	}
	c := newH3Client(t, lh.pool)
	c.get(t, "https://"+addr+"/n/before")
	// As the unit's ExecReload does: the same user (the control socket serves no other).
	if _, out, err := upgradeStop(t, filepath.Join(filepath.Dir(bin), "switchyard-unit"), "l7", p.ctl); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	p.waitLog(t, `a new process takes new connections; serving the open ones`)
	for i := range 3 {
		c.get(t, fmt.Sprintf("https://%s/n/after-%d", addr, i))
	}
	c.sameConn(t, "after an upgrade with the unit's capabilities")
	c.tr.Close()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the old process did not exit within 20 s of its last QUIC connection's end")
	}
}

// A connection still busy at the drain timeout (L7's timeouts.idle, 2 s here) is asked to go
// (GOAWAY) and its client's next request opens a connection to the new process: no request
// fails, the first connection served requests until about the timeout, and the old process exits.
func testUpgradeHTTP3DrainTimeout(t *testing.T, lh l7H3) {
	p, bin, addr := lh.start(t, "timeouts: {idle: 2s}\n", nil)
	c := newH3Client(t, lh.pool)
	c.get(t, "https://"+addr+"/n/before")
	if _, out, err := upgradeStop(t, bin, "l7", p.ctl); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	upgraded := time.Now()
	var lastOnFirst time.Duration // the last request on the first connection, after the upgrade
	for i := 0; time.Since(upgraded) < 4*time.Second; i++ {
		c.get(t, fmt.Sprintf("https://%s/n/busy-%d", addr, i))
		if c.dials.Load() == 1 {
			lastOnFirst = time.Since(upgraded)
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.waitLog(t, `drain timeout; asking the open connections to go`)
	if n := c.dials.Load(); n != 2 || lastOnFirst < 1500*time.Millisecond {
		t.Errorf("%d QUIC handshakes, the first connection served until %s after the upgrade; want it kept until the 2 s drain timeout, then one new connection", n, lastOnFirst)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatal("the old process did not exit after its drain timeout")
	}
}

// Where the program cannot be loaded (here: CAP_BPF and CAP_SYS_ADMIN dropped), the stop says so
// at start, and an upgrade still passes the UDP socket: the new process serves HTTP/3 (the old
// process's QUIC connections end, as before steering).
func testUpgradeHTTP3WithoutBPF(t *testing.T, lh l7H3) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux) to drop CAP_BPF")
	}
	// Unsteered, the old process may never see its client's close (the new one can read it from
	// the shared socket): its drain ends at timeouts.total.
	p, bin, addr := lh.start(t, "timeouts: {total: 3s}\n", func(dir, bin string) string {
		nobpf := filepath.Join(dir, "switchyard-nobpf")
		os.WriteFile(nobpf, []byte("#!/bin/sh\nexec setpriv --bounding-set -bpf,-sys_admin -- "+bin+" \"$@\"\n"), 0o755)
		return nobpf
	})
	p.waitLog(t, `http/3: QUIC connections will not survive an upgrade`)
	before := newH3Client(t, lh.pool)
	before.get(t, "https://"+addr+"/n/before")
	if _, out, err := upgradeStop(t, bin, "l7", p.ctl); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	before.tr.Close()
	select {
	case <-p.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the old process did not exit within 20 s of the upgrade")
	}
	after := newH3Client(t, lh.pool)
	after.get(t, "https://"+addr+"/n/after")
}

// l7H3 starts L7 stops with an HTTP/3 listener, each in a directory (and log) of its own.
type l7H3 struct {
	built, origin, cert, key string
	pool                     *x509.CertPool
}

// start runs an L7 (through the command wrap returns, when not nil) with extra configuration
// and returns it, its binary and its listener's address once it serves HTTP/3.
func (l l7H3) start(t *testing.T, extra string, wrap func(dir, bin string) string) (*stopProc, string, string) {
	t.Helper()
	dir := t.TempDir()
	bin := copyBinary(t, l.built, dir)
	run := bin
	if wrap != nil {
		run = wrap(dir, bin)
	}
	addr := freePort(t)
	path := filepath.Join(dir, "l7.yaml")
	os.WriteFile(path, []byte(l7H3Config(addr, l.cert, l.key, l.origin, extra)), 0o600)
	p := startStopProc(t, run, dir, "l7", "--config", path)
	p.waitLog(t, `"l7 http/3 listening"`)
	return p, bin, addr
}

// l7H3Config is an L7 configuration with one TLS listener serving HTTP/3 at addr, in front of
// origin, with QUIC-LB connection IDs (steering keeps their server ID; the edge's are plain).
func l7H3Config(addr, cert, key, origin, extra string) string {
	return fmt.Sprintf("listeners: [{address: %q, http3: true, quic_lb: {server_id: 515, config_id: 2}, tls: {certificates: [{cert: %q, key: %q}]}}]\nroutes: [{name: all, pool: app}]\npools: [{name: app, backends: [{address: %q}]}]\n%s",
		addr, cert, key, origin, extra)
}

// nextPort is the next port freePort tries: this test's range is 47101..47149.
var nextPort = 47101

// freePort is 127.0.0.1 with the next port of the range free on TCP and UDP.
func freePort(t *testing.T) string {
	t.Helper()
	for ; nextPort < 47150; nextPort++ {
		addr := fmt.Sprintf("127.0.0.1:%d", nextPort)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		pc.Close()
		nextPort++
		return addr
	}
	t.Fatal("no free port left in 47101..47149")
	return ""
}

// h3Client is an HTTP/3 client that counts its QUIC handshakes and keeps its connection.
type h3Client struct {
	tr    *http3.Transport
	c     *http.Client
	dials atomic.Int32
	first atomic.Pointer[quic.Conn]
}

func newH3Client(t *testing.T, pool *x509.CertPool) *h3Client {
	h := &h3Client{}
	h.tr = &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pool},
		Dial: func(ctx context.Context, addr string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
			h.dials.Add(1)
			c, err := quic.DialAddrEarly(ctx, addr, tc, qc)
			if err == nil {
				h.first.CompareAndSwap(nil, c)
			}
			return c, err
		}}
	h.c = &http.Client{Transport: h.tr, Timeout: 5 * time.Second}
	t.Cleanup(func() { h.tr.Close() })
	return h
}

func (h *h3Client) get(t *testing.T, url string) {
	t.Helper()
	if err := httpGet(h.c, url, "ok "); err != nil {
		t.Fatalf("GET %s over HTTP/3 (handshake %d): %v", url, h.dials.Load(), err)
	}
}

// sameConn fails unless every request so far went over one QUIC connection, still open.
func (h *h3Client) sameConn(t *testing.T, when string) {
	t.Helper()
	if n := h.dials.Load(); n != 1 {
		t.Fatalf("%s: %d QUIC handshakes; want the first connection kept", when, n)
	}
	if c := h.first.Load(); c == nil || c.Context().Err() != nil {
		t.Fatalf("%s: the first QUIC connection is closed", when)
	}
}
