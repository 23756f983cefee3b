package lab

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/cdn"
	"github.com/switchyard/switchyard/lab/topo"
)

// The Mini-CDN topology (`lab up --cdn`, seed 004): a router (`l7 run`, a consistent-hash pool
// by path over the edges) in front of three edges (`edge run`: disk tier, TTL, LRU memory) in
// front of an origin serving files (`lab origin`), the parts of package lab/cdn, which the
// mini-cdn experiment runs in one process. It is a topology of its own: one namespace,
// <prefix>-cdn, whose loopback carries every part on an address of its own.

// CDNRole is the role of the CDN namespace in `lab status`.
const CDNRole = topo.Role("cdn")

// The CDN's sizes: what `lab up --cdn` runs.
const (
	CDNFiles         = 200
	CDNFileBytes     = 16384
	CDNMemoryObjects = 100
	// CDNBudget is the router's in-flight budget: above it, 503 with X-Load-Shed: 1.
	CDNBudget = 16
	// CDNHealthInterval is the router's probe interval (two failures take an edge out).
	CDNHealthInterval = time.Second
	// CDNOriginDelay is added to every origin answer, CDNSlowDelay to /slow/... (uncacheable).
	CDNOriginDelay = 5 * time.Millisecond
	CDNSlowDelay   = 300 * time.Millisecond
)

// CDNState is the Mini-CDN of a lab: its namespace and the addresses of its parts.
type CDNState struct {
	NS     string   `json:"ns"`
	Router string   `json:"router"`
	Edges  []string `json:"edges"`
	Origin string   `json:"origin"`
	// Procs names the process of each part: router, edge1..3, origin.
	Procs map[string]string `json:"processes"`
}

// CDNEdgeProc is the process name of edge i (1-based), for StopProcess and StartProcess.
func CDNEdgeProc(i int) string { return "cdn-edge" + strconv.Itoa(i) }

func planCDN(prefix string) *CDNState {
	c := &CDNState{NS: prefix + "-cdn", Router: "127.0.10.1:80", Origin: "127.0.30.1:80",
		Procs: map[string]string{"router": "cdn-router", "origin": "cdn-origin"}}
	for i := 1; i <= 3; i++ {
		c.Edges = append(c.Edges, "127.0.20."+strconv.Itoa(i)+":80")
		c.Procs["edge"+strconv.Itoa(i)] = CDNEdgeProc(i)
	}
	return c
}

// UpCDN brings up the Mini-CDN topology under prefix, running the binary exe. It is idempotent
// (what runs keeps running, a dead part is started again); a lab of the other kind under the
// same prefix is refused.
func UpCDN(prefix, exe string) (*State, error) {
	old, err := LoadState(prefix)
	if err == nil && old.CDN == nil {
		return nil, fmt.Errorf("lab up --cdn: lab %q is up without --cdn: take it down (`switchyard lab down --prefix %s`) or pick another --prefix", prefix, prefix)
	}
	c := planCDN(prefix)
	st := &State{Prefix: prefix, Created: time.Now().UTC(), Balancer: "none (cdn)", CDN: c, Running: map[string]string{}}
	if old != nil {
		st.Created = old.Created
	}
	if err := namednetns.Create(c.NS); err != nil {
		return nil, fmt.Errorf("lab up --cdn: %w", err)
	}
	if err := ipCmd("-n", c.NS, "link", "set", "lo", "up"); err != nil {
		return nil, fmt.Errorf("lab up --cdn: %w", err)
	}
	dir := StateDir(prefix)
	start := func(part string, argv ...string) error {
		p, err := StartProcess(prefix, c.Procs[part], c.NS, argv...)
		if err != nil {
			return err
		}
		st.Procs = append(st.Procs, p)
		st.Running[part] = map[string]string{"lab": "origin", "edge": "edge", "l7": "l7"}[argv[1]]
		return nil
	}
	if err := start("origin", exe, "lab", "origin", "--listen", c.Origin, "--dir", filepath.Join(dir, "cdn-origin"),
		"--files", strconv.Itoa(CDNFiles), "--bytes", strconv.Itoa(CDNFileBytes),
		"--delay", CDNOriginDelay.String(), "--slow-delay", CDNSlowDelay.String()); err != nil {
		return st, err
	}
	hc := CDNClient(c, 2*time.Second)
	defer hc.CloseIdleConnections()
	if err := waitHTTP(hc, "http://"+c.Origin+"/healthz", 20*time.Second); err != nil {
		return st, fmt.Errorf("lab up --cdn: the origin: %w (see the cdn-*.log in %s)", err, dir)
	}
	for i, e := range c.Edges {
		name := CDNEdgeProc(i + 1)
		p, err := writeConfig(prefix, name, cdn.EdgeConfig(e, "http://"+c.Origin, filepath.Join(dir, name), CDNMemoryObjects))
		if err != nil {
			return st, err
		}
		if err := start("edge"+strconv.Itoa(i+1), exe, "edge", "run", "--config", p); err != nil {
			return st, err
		}
	}
	for _, e := range c.Edges { // the router starts once every edge answers its probe
		if err := waitHTTP(hc, "http://"+e+"/healthz", 20*time.Second); err != nil {
			return st, fmt.Errorf("lab up --cdn: an edge: %w (see the cdn-*.log in %s)", err, dir)
		}
	}
	router := cdn.RouterConfig(c.Router, c.Edges, "hash", CDNBudget, CDNHealthInterval) +
		fmt.Sprintf("admin: {address: %q}\n", CDNRouterAdmin)
	p, err := writeConfig(prefix, "cdn-router", router)
	if err != nil {
		return st, err
	}
	if err := start("router", exe, "l7", "run", "--config", p); err != nil {
		return st, err
	}
	if err := st.save(); err != nil {
		return st, err
	}
	if err := waitCDN(c, 20*time.Second); err != nil {
		return st, fmt.Errorf("lab up --cdn: %w (see the cdn-*.log in %s)", err, dir)
	}
	if err := waitRing(hc, c, 20*time.Second); err != nil {
		return st, fmt.Errorf("lab up --cdn: %w (see the cdn-*.log in %s)", err, dir)
	}
	return st, nil
}

// waitCDN waits until a file answers 200 through the router (every part listens).
func waitCDN(c *CDNState, d time.Duration) error {
	hc := CDNClient(c, 2*time.Second)
	defer hc.CloseIdleConnections()
	if err := waitHTTP(hc, "http://"+c.Router+"/healthz", d); err != nil {
		return fmt.Errorf("the router did not answer through an edge: %w", err)
	}
	return nil
}

// CDNClient is an HTTP client whose connections start inside the CDN namespace.
func CDNClient(c *CDNState, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: namednetns.Dialer(c.NS, &net.Dialer{Timeout: timeout}), MaxIdleConnsPerHost: 64, DisableCompression: true}}
}

// cdnStatus is `lab status` of a Mini-CDN lab: its namespace with every part's process.
func cdnStatus(st *State, procs map[string]int, out *Status) *Status {
	out.Up, out.Balancer, out.CDN, out.Notes = true, st.Balancer, st.CDN, st.Notes
	s := NSStatus{Name: st.CDN.NS, Host: "cdn", Role: CDNRole, Exists: namednetns.Exists(st.CDN.NS), Processes: map[string]int{}}
	if s.Exists {
		if ifs, err := topo.Interfaces(st.CDN.NS); err == nil {
			s.Interfaces = ifs
		}
	} else {
		out.Up = false
	}
	for _, p := range st.Procs {
		s.Processes[p.Name] = procs[p.Name]
		if procs[p.Name] == 0 {
			out.Up = false
		}
	}
	out.Namespaces = append(out.Namespaces, s)
	return out
}

func (c *CDNState) print(w io.Writer) {
	fmt.Fprintf(w, "\nmini-cdn (seed 004) in namespace %s: client -> router -> edges -> origin\n", c.NS)
	fmt.Fprintf(w, "  router  %-15s switchyard l7: hash by path, 100 virtual nodes per edge, /healthz every %s (fall 2),\n", c.Router, CDNHealthInterval)
	fmt.Fprintf(w, "  %-24s GET/HEAD retried once on another edge (X-Edge-Failover: 1), POST never; above %d in flight 503 X-Load-Shed: 1\n", "", CDNBudget)
	for i, e := range c.Edges {
		fmt.Fprintf(w, "  edge%d   %-15s switchyard edge: disk tier, TTL from the origin (600 s), memory %d objects, lru\n", i+1, e, CDNMemoryObjects)
	}
	fmt.Fprintf(w, "  origin  %-15s %d files /files/f0.bin.. of %d B (+%s), /slow/... uncacheable (+%s), %s\n", c.Origin, CDNFiles, CDNFileBytes, CDNOriginDelay, CDNSlowDelay, cdn.OriginStatsPath)
	fmt.Fprintf(w, "  try: nsenter --net=/run/netns/%s curl -si http://%s%s\n", c.NS, c.Router, cdn.FilePath(1))
}
