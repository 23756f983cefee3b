package dns

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/testutil"
)

// The reference servers (Debian's nsd, knot and bind9) run as subprocesses on fixed loopback
// ports of a range; every test picks ports that are free at that moment. The tests of a
// secondary switchyard (secondary_test.go) take theirs from secondaryPorts.
var (
	refPorts       = &portRange{first: 21310, last: 21399}
	secondaryPorts = &portRange{first: 22500, last: 22599}
)

// portRange hands out the ports of first..last in turn.
type portRange struct {
	mu          sync.Mutex
	first, last int
	next        int
}

// refPort returns a port of refPorts where both UDP and TCP on 127.0.0.1 are free now.
func refPort(t testing.TB) int { return refPorts.free(t) }

// free returns a port of the range where both UDP and TCP on 127.0.0.1 are free now.
func (r *portRange) free(t testing.TB) int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for range r.last - r.first + 1 {
		if r.next < r.first || r.next > r.last {
			r.next = r.first
		}
		p := r.next
		r.next++
		if testutil.PortFree(p) {
			return p
		}
	}
	t.Fatalf("no free port in %d-%d", r.first, r.last)
	return 0
}

// refServer is a running reference server.
type refServer struct {
	name string
	addr string
	dir  string
	out  *os.File
	cmd  *exec.Cmd
}

// reload makes the server read its configuration and zone files again (SIGHUP, which NSD, Knot
// and BIND's named all take as reload).
func (r *refServer) reload(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatalf("reload %s: %v", r.name, err)
	}
}

// log returns the server's output so far (for failure messages and checks of what it did).
func (r *refServer) log() string {
	var b []byte
	for _, f := range []string{"out", "nsd.log", "named.log"} {
		x, _ := os.ReadFile(filepath.Join(r.dir, f))
		b = append(b, x...)
	}
	return string(b)
}

// needBinary skips the test when the reference server is not installed.
func needBinary(t *testing.T, bin, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("%s not installed: apt-get install %s (the comparison with it needs the real server)", bin, pkg)
	}
	return p
}

// runRef starts bin with args in dir, stops it when the test ends, and waits until it answers
// SOA for origin (when wait is set).
func runRef(t *testing.T, name, bin, dir string, port int, origin string, wait bool, args ...string) *refServer {
	t.Helper()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	// Killed with the test binary too, when a panic skips the cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	r := &refServer{name: name, addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, out: out, cmd: cmd}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		out.Close()
	})
	if wait {
		var err error
		testutil.Eventually(t, 20*time.Second, func() bool {
			var m *mdns.Msg
			m, _, err = Query(context.Background(), r.addr, origin, mdns.TypeSOA, QueryOptions{Timeout: 300 * time.Millisecond})
			return err == nil && m.Rcode == mdns.RcodeSuccess && len(m.Answer) == 1
		}, "%s does not answer SOA %s on %s: %v\n%s", name, origin, r.addr, func() any { return err }, func() any { return r.log() })
	}
	return r
}

// refDir is a new directory for a reference server, holding zoneText (when set) as its file
// "zone", and the server's port: port, or one of refPorts when port is 0.
func refDir(t *testing.T, port int, zoneText string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	if zoneText != "" {
		if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(zoneText), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if port == 0 {
		port = refPort(t)
	}
	return dir, port
}

// startNSD serves zoneText for origin with NSD; zoneConf is appended to its zone: clause.
func startNSD(t *testing.T, origin, zoneText, zoneConf string) *refServer {
	t.Helper()
	return startNSDOn(t, 0, origin, zoneText, "", zoneConf)
}

// startNSDOn is startNSD on a given port (0 picks one), with topConf (key clauses) before the
// zone clause.
func startNSDOn(t *testing.T, port int, origin, zoneText, topConf, zoneConf string) *refServer {
	t.Helper()
	bin := needBinary(t, "nsd", "nsd")
	dir, port := refDir(t, port, zoneText)
	zoneLine := ""
	if zoneText != "" {
		zoneLine = "  zonefile: zone\n"
	}
	conf := fmt.Sprintf(`server:
  ip-address: 127.0.0.1@%d
  server-count: 1
  username: ""
  chroot: ""
  zonesdir: "%s"
  pidfile: "%s/nsd.pid"
  xfrdfile: "%s/xfrd.state"
  xfrdir: "%s"
  zonelistfile: "%s/zone.list"
  database: ""
  logfile: "%s/nsd.log"
  verbosity: 2
  rrl-ratelimit: 0
remote-control:
  control-enable: no
%szone:
  name: %s
%s%s`, port, dir, dir, dir, dir, dir, dir, topConf, origin, zoneLine, zoneConf)
	if err := os.WriteFile(filepath.Join(dir, "nsd.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return runRef(t, "nsd", bin, dir, port, origin, zoneText != "", "-d", "-c", filepath.Join(dir, "nsd.conf"))
}

// knotServer is the start of a Knot configuration: its server, log and database sections
// (%[1]s: its directory, %[2]d: its port).
const knotServer = `server:
  rundir: "%[1]s"
  listen: 127.0.0.1@%[2]d
  udp-workers: 1
  tcp-workers: 1
  background-workers: 1
log:
  - target: stderr
    any: info
database:
  storage: "%[1]s"
`

// startKnot serves zoneText for origin with Knot; zoneConf is appended to its zone entry and
// topConf (keys, remotes, acls) before the template.
func startKnot(t *testing.T, origin, zoneText, topConf, zoneConf string) *refServer {
	t.Helper()
	return startKnotOn(t, 0, origin, zoneText, topConf, zoneConf)
}

// startKnotOn is startKnot on a given port (0 picks one).
func startKnotOn(t *testing.T, port int, origin, zoneText, topConf, zoneConf string) *refServer {
	t.Helper()
	bin := needBinary(t, "knotd", "knot")
	dir, port := refDir(t, port, zoneText)
	fileLine := ""
	if zoneText != "" {
		fileLine = "    file: zone\n"
	}
	conf := fmt.Sprintf(knotServer, dir, port) + topConf + fmt.Sprintf(`template:
  - id: default
    storage: "%s"
    zonefile-sync: -1
zone:
  - domain: %s
%s%s`, dir, origin, fileLine, zoneConf)
	if err := os.WriteFile(filepath.Join(dir, "knot.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return runRef(t, "knot", bin, dir, port, origin, zoneText != "", "-c", filepath.Join(dir, "knot.conf"))
}

// startBIND serves zoneText for origin as a primary with BIND's named on port; topConf (key
// clauses) goes before the options and zoneConf into the zone statement.
func startBIND(t *testing.T, port int, origin, zoneText, topConf, zoneConf string) *refServer {
	t.Helper()
	return runBIND(t, port, origin, zoneText, topConf, "", "  type primary;\n  file \"zone\";\n"+zoneConf)
}

// runBIND runs BIND's named on port with topConf before the options, optConf inside them and
// zoneConf as origin's zone statement; zoneText, when set, is the file "zone" beside named.conf.
// It waits until origin is served.
func runBIND(t *testing.T, port int, origin, zoneText, topConf, optConf, zoneConf string) *refServer {
	t.Helper()
	bin := needBinary(t, "named", "bind9")
	dir, port := refDir(t, port, zoneText)
	conf := fmt.Sprintf(`%soptions {
  directory "%s";
  pid-file "%s/named.pid";
  session-keyfile "%s/session.key";
  listen-on port %d { 127.0.0.1; };
  listen-on-v6 { none; };
  recursion no;
  dnssec-validation no;
%s};
logging { channel f { file "%s/named.log"; severity info; print-time yes; }; category default { f; }; category xfer-in { f; }; category xfer-out { f; }; category notify { f; }; };
zone "%s" {
%s};
`, topConf, dir, dir, dir, port, optConf, dir, origin, zoneConf)
	if err := os.WriteFile(filepath.Join(dir, "named.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return runRef(t, "named", bin, dir, port, origin, zoneText != "", "-g", "-4", "-n", "1", "-c", filepath.Join(dir, "named.conf"))
}

// startZoneServer serves zoneText for origin with switchyard (extra YAML is added to the zone).
func startZoneServer(t *testing.T, origin, zoneText, top, zoneExtra string, opt Options) *Server {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "zone"), []byte(zoneText), 0o644); err != nil {
		t.Fatal(err)
	}
	yml := top + "zones:\n  - origin: " + origin + "\n    file: zone\n" + zoneExtra
	cfg, err := config.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("parse config: %v\n%s", err, yml)
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Dir = dir
	return startConfig(t, cfg, opt)
}

// exchangeRaw sends raw over UDP to addr and returns the raw response.
func exchangeRaw(t *testing.T, addr string, raw []byte) []byte {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 65535)
	for try := 0; try < 3; try++ {
		c.Write(raw)
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		if err == nil {
			return buf[:n]
		}
	}
	t.Fatalf("no answer from %s", addr)
	return nil
}

// answerSet returns the answer section as sorted lowercase strings, for comparing servers.
func answerSet(m *mdns.Msg) string {
	var s []string
	for _, rr := range m.Answer {
		s = append(s, strings.ToLower(rr.String()))
	}
	sortStrings(s)
	return strings.Join(s, "\n")
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}
