package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/store"
	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/topo"
)

// The lab's fleet store: etcd members in their own namespace <prefix>-etcd, on a segment of
// their own behind the router (198.18.250.0/24), so that every balancer reaches them through
// the fabric like a real fleet reaches its etcd.
var (
	storeNet4    = netip.MustParsePrefix("198.18.250.0/24")
	storeRouter4 = netip.MustParseAddr("198.18.250.1")
)

const (
	storePort   = "etcd" // the router's port toward the store namespace
	storeClient = 2379
	storePeer   = 2380
	// MaxStoreMembers bounds `lab up --store-members`.
	MaxStoreMembers = 5
)

// StoreRole is the role of the store namespace in `lab status`.
const StoreRole = topo.Role("store")

// StoreState is the lab's etcd cluster.
type StoreState struct {
	NS string `json:"ns"`
	// URL is what the balancers run with (`lb run --store`): etcds:// with the lab's CA and the
	// balancers' certificate, or etcd:// for a plain store (storetls.go).
	URL string `json:"url"`
	// Plain is set for a store without TLS or auth (`lab up --store-plain`).
	Plain bool `json:"plain,omitempty"`
	// Passwords is set for a store whose users authenticate by password (`lab up
	// --store-passwords`).
	Passwords bool          `json:"passwords,omitempty"`
	Members   []StoreMember `json:"members"`
}

// StoreMember is one etcd member.
type StoreMember struct {
	Name    string     `json:"name"`
	Addr    netip.Addr `json:"addr"`
	DataDir string     `json:"data_dir"`
	// Argv is its command line, to restart it with the same data dir.
	Argv []string `json:"argv"`
}

// StoreNS is the store namespace of a lab.
func StoreNS(prefix string) string { return prefix + "-etcd" }

// planStore computes the members of a cluster of n, served over TLS with auth unless plain
// (users by password with passwords, else by certificate).
func planStore(prefix string, n int, plain, passwords bool) *StoreState {
	s := &StoreState{NS: StoreNS(prefix), Plain: plain, Passwords: passwords}
	f := storeFilesOf(prefix)
	scheme := "https://"
	if plain {
		scheme = "http://"
	}
	var eps, peers []string
	for i := 1; i <= n; i++ {
		a := netip.AddrFrom4([4]byte{198, 18, 250, byte(10 + i)})
		m := StoreMember{Name: fmt.Sprintf("etcd%d", i), Addr: a, DataDir: filepath.Join(StateDir(prefix), "etcd-data", fmt.Sprintf("m%d", i))}
		s.Members = append(s.Members, m)
		eps = append(eps, netip.AddrPortFrom(a, storeClient).String())
		peers = append(peers, fmt.Sprintf("%s=http://%s", m.Name, netip.AddrPortFrom(a, storePeer)))
	}
	for i := range s.Members {
		m := &s.Members[i]
		client := scheme + netip.AddrPortFrom(m.Addr, storeClient).String()
		peer := "http://" + netip.AddrPortFrom(m.Addr, storePeer).String()
		m.Argv = []string{"etcd", "--name", m.Name, "--data-dir", m.DataDir,
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(peers, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "switchyard-" + prefix,
			// Fast elections on a lab's loopback-speed links: a lost member is replaced quickly.
			"--heartbeat-interval", "100", "--election-timeout", "1000"}
		if !plain {
			m.Argv = append(m.Argv, memberTLSArgs(f, m.Name, s.Passwords)...)
		}
	}
	s.URL = store.URL{Endpoints: eps, Prefix: StorePrefix(prefix)}.String()
	if !plain {
		s.URL = f.url(eps, StorePrefix(prefix), s.Passwords)
	}
	return s
}

// StorePrefix is the key prefix of a lab's fleet in its store.
func StorePrefix(prefix string) string { return "/switchyard/" + prefix }

// startStore builds the store namespace, starts its members, waits for a quorum and seeds the
// lab's VIPs (with health check h) into it.
func startStore(st *State, members int, plain, passwords bool, h *config.HealthCheck, start func(name, ns string, argv ...string) error) error {
	if members < 1 || members > MaxStoreMembers {
		return fmt.Errorf("lab up: --store-members %d: use 1..%d (0: no store)", members, MaxStoreMembers)
	}
	if plain && passwords {
		return errors.New("lab up: --store-plain and --store-passwords: a plain store has no users; give one of them")
	}
	if _, err := exec.LookPath("etcd"); err != nil {
		return errors.New("lab up: etcd not found: install Debian's etcd-server (`make deps`), or run without a store (--store-members 0)")
	}
	s := planStore(st.Prefix, members, plain, passwords)
	if err := buildStoreNS(st.Topo.RouterNS, s); err != nil {
		return fmt.Errorf("lab up: store namespace: %w", err)
	}
	if !plain {
		if err := writeStorePKI(s, storeFilesOf(st.Prefix)); err != nil {
			return err
		}
	}
	for _, m := range s.Members {
		if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
			return fmt.Errorf("lab up: etcd data dir: %w", err)
		}
		if err := start(m.Name, s.NS, m.Argv...); err != nil {
			return err
		}
	}
	st.Store = s
	if !plain {
		if err := enableStoreAuth(s, storeFilesOf(st.Prefix), StorePrefix(st.Prefix)); err != nil {
			return fmt.Errorf("%w (see the etcd logs in %s)", err, StateDir(st.Prefix))
		}
	}
	cl, err := OpenStore(st)
	if err != nil {
		return err
	}
	defer cl.Close()
	if st.reup {
		return nil // seeded when the lab came up; it holds the changes made since (reup.go)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var vips []config.VIP
	for _, v := range DaemonConfigFor(st.Lab(), st.Lab().Balancer(), "", h).VIPs {
		v.ApplyDefaults()
		vips = append(vips, v)
	}
	for {
		_, err := cl.Seed(ctx, vips)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("lab up: the store did not answer within 30s: %w (see the etcd logs in %s)", err, StateDir(st.Prefix))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// buildStoreNS makes the store namespace with a veth to the router and every member's address.
func buildStoreNS(routerNS string, s *StoreState) error {
	if err := namednetns.Create(s.NS); err != nil {
		return err
	}
	if err := ipCmd("-n", routerNS, "link", "show", storePort); err != nil {
		if err := ipCmd("-n", routerNS, "link", "add", storePort, "type", "veth", "peer", "name", "eth0", "netns", s.NS); err != nil {
			return err
		}
	}
	cmds := [][]string{
		{"-n", routerNS, "addr", "replace", netip.PrefixFrom(storeRouter4, storeNet4.Bits()).String(), "dev", storePort},
		{"-n", routerNS, "link", "set", storePort, "up"},
		{"-n", s.NS, "link", "set", "lo", "up"},
		{"-n", s.NS, "link", "set", "eth0", "up"},
	}
	for _, m := range s.Members {
		cmds = append(cmds, []string{"-n", s.NS, "addr", "replace", netip.PrefixFrom(m.Addr, storeNet4.Bits()).String(), "dev", "eth0"})
	}
	cmds = append(cmds, []string{"-n", s.NS, "route", "replace", "default", "via", storeRouter4.String()})
	for _, c := range cmds {
		if err := ipCmd(c...); err != nil {
			return err
		}
	}
	return nil
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// OpenStore is a client of the lab's store that dials from inside the store namespace (the
// host namespace has no route to the lab).
func OpenStore(st *State) (*store.Store, error) {
	if st.Store == nil {
		return nil, errors.New("the lab runs no store: bring it up with `lab up --store-members N`")
	}
	u, err := store.ParseURL(st.Store.URL)
	if err != nil {
		return nil, err
	}
	dial := namednetns.Dialer(st.Store.NS, &net.Dialer{Timeout: 2 * time.Second})
	return store.Open(u, store.Options{Dial: func(ctx context.Context, addr string) (net.Conn, error) {
		return dial(ctx, "tcp", addr)
	}})
}

// StopStoreMember kills member i (1-based), keeping its data dir.
func StopStoreMember(st *State, i int) error {
	return StopProcess(st.Prefix, st.Store.Members[i-1].Name, 5*time.Second)
}

// StartStoreMember starts member i again on its data dir.
func StartStoreMember(st *State, i int) error {
	m := st.Store.Members[i-1]
	_, err := StartProcess(st.Prefix, m.Name, st.Store.NS, m.Argv...)
	return err
}

// upStore starts the store of `lab up` when asked for (daemon mode only: direct mode has no
// daemon to follow it).
func upStore(o UpOptions, st *State, start func(name, ns string, argv ...string) error) error {
	if o.StoreMembers == 0 {
		return nil
	}
	if o.Balancer != ModeDaemon {
		st.Notes = append(st.Notes, "no store: --store-members needs --balancer daemon")
		return nil
	}
	h := o.Health
	if h == nil {
		h = DefaultHealth()
	}
	if o.NoHealth {
		h = nil
	}
	return startStore(st, o.StoreMembers, o.StorePlain, o.StorePasswords, h, start)
}

// storeArgs are the extra `lb run` arguments of a lab with a store.
func storeArgs(st *State) []string {
	if st.Store == nil {
		return nil
	}
	return []string{"--store", st.Store.URL}
}
