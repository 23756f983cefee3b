package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/internal/pebble"
	"github.com/switchyard/switchyard/lab/topo"
)

// Balancer modes of `lab up`.
const (
	// ModeDaemon runs `switchyard lb run` in each balancer namespace (health checks, drain,
	// the operator CLI over its socket).
	ModeDaemon = "daemon"
	// ModeDirect loads the forwarder once from `lab up` and writes its maps directly; the pinned
	// link keeps it attached after `lab up` exits. No health checks.
	ModeDirect = "direct"
)

// UpOptions say what `lab up` builds and runs.
type UpOptions struct {
	Spec Spec
	// Exe is the switchyard binary the lab's processes run.
	Exe string
	// Balancer is ModeDaemon or ModeDirect.
	Balancer string
	// Stops are the other stops whose commands exist in Exe (dns, edge, l7); a namespace for a
	// stop that is missing stays empty, and the L7 namespaces run app servers instead.
	Stops map[string]bool
	// Health is the daemon's health check on TCP VIPs: nil takes DefaultHealth, and NoHealth
	// turns health checking off.
	Health   *config.HealthCheck
	NoHealth bool
	// StoreMembers > 0 runs an etcd cluster of that many members in its own namespace, seeds
	// the lab's VIPs into it and runs the balancer daemons with --store (daemon mode only).
	StoreMembers int
	// StorePlain runs the store without TLS or auth (etcd://); by default its members serve
	// TLS with client certificates and auth is on (storetls.go).
	StorePlain bool
	// StorePasswords authenticates the balancers by etcd user and password (from a file)
	// instead of client certificates; the members serve TLS without --client-cert-auth.
	StorePasswords bool
	// Standby > 0 leaves the daemons of the last Standby balancers unstarted (their namespaces,
	// configuration files and router sessions are ready): StartBalancer brings one into the
	// fleet later, as a node that joins.
	Standby int
	// UI and Prometheus are the listen addresses (host namespace) of the lab's web view and
	// of Prometheus scraping every stop (observe.go): "" none, Auto a free loopback port.
	UI, Prometheus string
}

// State is what `lab up` built, saved as <state dir>/state.json for status, demo and down.
type State struct {
	Prefix   string    `json:"prefix"`
	Created  time.Time `json:"created"`
	Balancer string    `json:"balancer"`
	// BGP: the router runs bird2 and learns the VIP routes from the balancers.
	BGP   bool           `json:"bgp,omitempty"`
	Topo  *topo.Topology `json:"topology"`
	VIPs  []VIP          `json:"vips"`
	Procs []Proc         `json:"processes"`
	// Sockets maps each balancer namespace to its daemon's API socket (daemon mode).
	Sockets map[string]string `json:"sockets,omitempty"`
	// Running maps each host to what runs there: app, l7, edge, dns (app also on L7 hosts when
	// the binary has no L7 stop).
	Running map[string]string `json:"running"`
	// Notes says what of the full path runs and what is missing.
	Notes []string `json:"notes,omitempty"`
	// Store is the lab's etcd cluster (nil: the daemons use their files).
	Store *StoreState `json:"store,omitempty"`
	// UI and Prometheus are the URLs of the lab's web view and Prometheus (observe.go).
	UI         string `json:"ui,omitempty"`
	Prometheus string `json:"prometheus,omitempty"`
	// ACME is the lab's ACME CA and the edge's names (acme.go); nil without DNS and the edge.
	ACME *ACMEState `json:"acme,omitempty"`
	// CDN is set on a Mini-CDN lab (`lab up --cdn`, cdn.go), which has no Topo and no VIPs.
	CDN *CDNState `json:"cdn,omitempty"`
	// reup: `lab up` runs on a lab that is up, whose live state (reup.go) it keeps; kept are
	// the daemon configuration files it left as they were.
	reup bool
	kept []string
	// pebble is the lab's ACME CA when this run of `lab up` started it (acme.go).
	pebble *pebble.Server
}

func statePath(prefix string) string { return filepath.Join(StateDir(prefix), "state.json") }

// LoadState reads the state of a lab that is up.
func LoadState(prefix string) (*State, error) {
	b, err := os.ReadFile(statePath(prefix))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read lab state: no lab %q is up (start one with `switchyard lab up`)", prefix)
	}
	if err != nil {
		return nil, fmt.Errorf("read lab state: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("read lab state %s: %w (remove it with `switchyard lab down`)", statePath(prefix), err)
	}
	return &s, nil
}

func (s *State) save() error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode lab state: %w", err)
	}
	if err := os.MkdirAll(StateDir(s.Prefix), 0o700); err != nil {
		return fmt.Errorf("create lab state directory: %w", err)
	}
	if err := os.WriteFile(statePath(s.Prefix), b, 0o600); err != nil {
		return fmt.Errorf("write lab state: %w", err)
	}
	return nil
}

// Lab rebuilds the plan from a saved state.
func (s *State) Lab() *Lab { return &Lab{Topo: s.Topo, VIPs: s.VIPs, BGP: s.BGP} }

// Up builds the lab and starts its processes. Running it again on a lab that is up changes
// nothing that already runs.
func Up(o UpOptions) (*State, error) {
	if o.Spec.BGP && o.Balancer != ModeDaemon {
		return nil, fmt.Errorf("lab up: BGP needs the balancer daemon (--balancer daemon), or static routes (--static-routes)")
	}
	if old, err := LoadState(o.Spec.Prefix); err == nil && old.CDN != nil {
		return nil, fmt.Errorf("lab %q is the Mini-CDN (`lab up --cdn`): take it down (`switchyard lab down --prefix %[1]s`) or pick another --prefix", o.Spec.Prefix)
	}
	l, err := Plan(o.Spec)
	if err != nil {
		return nil, err
	}
	if err := l.Build(); err != nil {
		return nil, err
	}
	if err := l.AttachBackendPortPass(); err != nil { // the daemon runs with second chance on
		return nil, err
	}
	st := &State{Prefix: o.Spec.Prefix, Created: time.Now().UTC(), Balancer: o.Balancer, BGP: l.BGP, Topo: l.Topo, VIPs: l.VIPs, Sockets: map[string]string{}, Running: map[string]string{}}
	old, err := LoadState(o.Spec.Prefix)
	if err == nil {
		st.Created, st.reup = old.Created, true
	}
	start := func(name, ns string, argv ...string) error {
		p, err := StartProcess(st.Prefix, name, ns, argv...)
		if err != nil {
			return err
		}
		st.Procs = append(st.Procs, p)
		return nil
	}
	for _, n := range l.Topo.ByRole(topo.Backend) {
		if err := start(n.Name, n.NS, appArgv(o.Exe, n)...); err != nil {
			return st, err
		}
		st.Running[n.Name] = "app"
	}
	if err := startStops(o, l, st, start); err != nil {
		return st, err
	}
	if err := upStore(o, st, start); err != nil {
		return st, err
	}
	if l.BGP {
		if err := startRouter(st, start); err != nil {
			return st, err
		}
	}
	active := l.Topo.ByRole(topo.Balancer)
	active = active[:max(0, len(active)-o.Standby)]
	if err := startBalancers(o, l, st, active, start); err != nil {
		return st, err
	}
	st.noteKept(o)
	if err := st.save(); err != nil {
		return st, err
	}
	if err := startObserve(o, st, old, start); err != nil { // after save: `lab ui` reads the state
		return st, err
	}
	if err := st.save(); err != nil {
		return st, err
	}
	if o.Balancer == ModeDaemon {
		for _, n := range l.Topo.ByRole(topo.Balancer) {
			sock, ok := st.Sockets[n.NS]
			if !ok {
				continue // a standby
			}
			if err := waitAnswering(sock, n.Name, filepath.Join(StateDir(st.Prefix), n.Name+".log"), balancerStartTimeout); err != nil {
				return st, fmt.Errorf("lab up: %w", err)
			}
		}
	}
	if err := waitObserve(st, 15*time.Second); err != nil {
		return st, fmt.Errorf("lab up: %w", err)
	}
	if st.pebble != nil {
		if err := waitCertificate(st, time.Minute); err != nil {
			return st, fmt.Errorf("lab up: %w", err)
		}
		if err := st.save(); err != nil {
			return st, err
		}
	}
	if l.BGP {
		if _, err := l.WaitVIPRoutes(active, 45*time.Second); err != nil {
			return st, fmt.Errorf("lab up: %w (see bird.log and the lb*.log in %s, `switchyard lb status --socket ...`)", err, StateDir(st.Prefix))
		}
	}
	return st, nil
}

// startBalancers brings up every balancer node the way o.Balancer asks: in daemon mode it writes
// each node's configuration and starts the daemon on the active ones only (a standby keeps its
// configuration for StartBalancer to bring it in later); in direct mode it attaches the
// forwarder program, which the pinned link keeps attached without a process. It is apart from
// Up because it is the one step that differs by balancer mode.
func startBalancers(o UpOptions, l *Lab, st *State, active []topo.Node, start func(name, ns string, argv ...string) error) error {
	for i, n := range l.Topo.ByRole(topo.Balancer) {
		switch o.Balancer {
		case ModeDaemon:
			h := o.Health
			if h == nil {
				h = DefaultHealth()
			}
			if o.NoHealth {
				h = nil
			}
			_, sock, err := writeDaemonConfig(st, n, h)
			if err != nil {
				return err
			}
			if i >= len(active) {
				continue // standby
			}
			st.Sockets[n.NS] = sock
			if err := start(n.Name, n.NS, BalancerArgv(st, o.Exe, n)...); err != nil {
				return err
			}
		case ModeDirect:
			f, err := l.StartForwarder(n, 65537)
			if err != nil {
				return err
			}
			f.Close() // the pinned link keeps the program attached
		default:
			return fmt.Errorf("lab up: unknown balancer mode %q: use daemon or direct", o.Balancer)
		}
	}
	return nil
}

// appArgv is the command line of an app server on a node: HTTP on every address, UDP echo on
// the host's address and on each VIP of its loopback.
func appArgv(exe string, n topo.Node) []string {
	argv := []string{exe, "lab", "app", "--name", n.Name, "--listen", ":80", "--udp", netip.AddrPortFrom(n.Addr4, 7).String()}
	for _, a := range n.Loopback {
		argv = append(argv, "--udp", netip.AddrPortFrom(a, 7).String())
	}
	return argv
}

// DefaultHealth is the lab's health check: HTTP /health every second, 3 failures mark a
// backend down, 2 successes bring it back.
func DefaultHealth() *config.HealthCheck {
	return &config.HealthCheck{Type: "http", Port: 80, Path: "/health", ExpectStatus: 200,
		Interval: config.Duration(time.Second), Timeout: config.Duration(500 * time.Millisecond), Rise: 2, Fall: 3}
}

// DaemonConfigFor is the `switchyard lb run` configuration of balancer n serving the lab's
// VIPs, with health checks h on TCP VIPs (nil: none).
func DaemonConfigFor(l *Lab, n topo.Node, socket string, h *config.HealthCheck) *config.Config {
	seg := l.Topo.Segment(n.Segment)
	c := &config.Config{
		Interface: n.Iface, XDPMode: "native", PinDir: PinDir(n.NS, n.Iface), Socket: socket,
		NextHop: seg.Router4.String(), EncapSource4: Encap4.String(), EncapSource6: Encap6.String(),
		DrainTimeout: config.Duration(5 * time.Minute), AllBackendsDown: "keep",
	}
	for _, v := range l.VIPs {
		dv := config.VIP{Name: v.Name, Address: v.Address, Port: v.Port, Protocol: v.Protocol, BGP: v.BGP.Clone(), QUIC: config.QUIC{Enabled: v.QUIC}}
		if v.Protocol == "tcp" {
			dv.Health = h
		}
		for i, b := range v.Backends {
			be := config.Backend{Address: b.String(), Weight: 1}
			if v.QUIC {
				be.ServerID = v.ServerID(i)
			}
			dv.Backends = append(dv.Backends, be)
		}
		c.VIPs = append(c.VIPs, dv)
	}
	if l.BGP {
		c.BGP = BGPFor(l.Topo, n)
	}
	return c
}

// SocketPath is the lab's daemon socket of a balancer namespace.
func SocketPath(prefix, ns string) string { return filepath.Join(StateDir(prefix), ns+".sock") }

func writeDaemonConfig(st *State, n topo.Node, h *config.HealthCheck) (string, string, error) {
	sock := SocketPath(st.Prefix, n.NS)
	p := ConfigPath(st.Prefix, n.NS)
	if st.keepConfig(p) {
		return p, sock, nil
	}
	if err := os.MkdirAll(StateDir(st.Prefix), 0o700); err != nil {
		return "", "", fmt.Errorf("create lab state directory: %w", err)
	}
	c := DaemonConfigFor(st.Lab(), n, sock, h)
	if st.Store != nil {
		c.VIPs = nil // they live in the store
	}
	return p, sock, c.Save(p)
}
