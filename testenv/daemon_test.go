package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/testutil"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/topo"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// switchyardBin builds the switchyard binary once per test run: the lab runs the daemon and
// the app servers as real processes inside the namespaces.
func switchyardBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "switchyard-e2e-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "switchyard")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/switchyard").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// daemonLab is a lab whose balancer is `switchyard lb run` and whose backends run
// `switchyard lab app` processes.
type daemonLab struct {
	*lab.State
	bin  string
	sock string
	c1   *http.Client
}

func newDaemonLab(t *testing.T, backends int) *daemonLab {
	t.Helper()
	return newDaemonLabHealth(t, backends, nil)
}

// newDaemonLabHealth is newDaemonLab with the daemon's health check h (nil: lab.DefaultHealth).
func newDaemonLabHealth(t *testing.T, backends int, h *config.HealthCheck) *daemonLab {
	t.Helper()
	testutil.RequireLab(t)
	bin := switchyardBin(t)
	s := lab.Spec{Prefix: uniquePrefix(), Clients: 2, Balancers: 1, Backends: backends}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(lab.StateDir(s.Prefix), "lb1.log"))
			t.Logf("daemon log:\n%s", b)
		}
		if err := lab.Destroy(s.Prefix); err != nil {
			t.Errorf("destroy lab: %v", err)
		}
	})
	st, err := lab.Up(lab.UpOptions{Spec: s, Exe: bin, Balancer: lab.ModeDaemon, Health: h})
	if err != nil {
		t.Fatal(err)
	}
	d := &daemonLab{State: st, bin: bin, sock: st.Sockets[st.Lab().Balancer().NS]}
	d.c1 = lab.HTTPClient(st.Lab().Client(1), false, 10*time.Second)
	// Wait until every backend is healthy: the daemon's checks need rise x interval.
	testutil.Eventually(t, 20*time.Second, func() bool {
		bes, err := d.backends("web")
		if err != nil || len(bes) != backends {
			return false
		}
		for _, b := range bes {
			if b.Health != "healthy" {
				return false
			}
		}
		return true
	}, "not every backend healthy")
	return d
}

// cli runs a switchyard command against the lab's daemon socket.
func (d *daemonLab) cli(args ...string) ([]byte, error) {
	cmd := exec.Command(d.bin, args...)
	cmd.Env = append(os.Environ(), "SWITCHYARD_SOCKET="+d.sock)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("switchyard %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes(), nil
}

// backendRow is one row of `switchyard backend list --json`.
type backendRow struct {
	VIP         string `json:"vip"`
	Address     string `json:"address"`
	State       string `json:"state"`
	Health      string `json:"health"`
	HealthMode  string `json:"health_mode"`
	InRing      bool   `json:"in_ring"`
	ActiveFlows int    `json:"active_flows"`
}

func (d *daemonLab) backends(vip string) ([]backendRow, error) {
	out, err := d.cli("backend", "list", "--json", vip)
	if err != nil {
		return nil, err
	}
	var rows []backendRow
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, fmt.Errorf("decode backend list: %v: %s", err, out)
	}
	return rows, nil
}

func (d *daemonLab) backend(t *testing.T, vip, addr string) backendRow {
	t.Helper()
	rows, err := d.backends(vip)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Address == addr {
			return r
		}
	}
	t.Fatalf("backend %s not in `backend list %s`: %+v", addr, vip, rows)
	return backendRow{}
}

// admin steers a backend's app server over its own address (not through the VIP).
func (d *daemonLab) admin(t *testing.T, n topo.Node, path string) {
	t.Helper()
	code, _, body, err := get(d.c1, fmt.Sprintf("http://%s/admin/%s", n.Addr4, path))
	if err != nil || code != 200 {
		t.Fatalf("admin %s on %s: %d %q %v", path, n.Name, code, body, err)
	}
}

// keepAliveConn is one raw persistent HTTP/1.1 connection (lab.KeepAlive), so that a test
// holds exactly the connections it counts.
type keepAliveConn struct {
	c net.Conn
	k *lab.KeepAlive
}

func dialKeepAlive(ns, addr string) (*keepAliveConn, error) {
	k, err := lab.DialKeepAlive(ns, addr)
	if err != nil {
		return nil, err
	}
	return &keepAliveConn{c: k.Conn, k: k}, nil
}

// do sends one request on the connection and returns the answering backend's name.
func (k *keepAliveConn) do(path string) (string, error) { return k.k.Do(path) }
