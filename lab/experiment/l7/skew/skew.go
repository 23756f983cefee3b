// Package skew re-measures the layer-4 lesson's skew experiment through the real L7 proxy: six
// clients, each on one persistent connection, send 1, 2, 4, 8, 16 and 32 requests in sequence
// (alternating /tracking and /event) through switchyard's L7 tier to three replicas on loopback.
// Because the L7 tier decides per request, the request skew that a per-connection decision
// produced (4.00) goes away, at the price of one decision per request instead of one per connection.
package skew

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/l7"
)

// Replica is one application replica's counters.
type Replica struct {
	Name        string
	Pool        string
	Connections int            // upstream connections the replica accepted from the proxy
	Requests    int            // requests it answered
	Paths       map[string]int // requests by path
}

// Result is one run.
type Result struct {
	Mix               []int
	Split             bool
	ClientConnections int // connections the proxy accepted from clients
	Replicas          []Replica
	Decisions         int64
	Requests          int
}

// ConnectionSkew is max/min of upstream connections per replica.
func (r *Result) ConnectionSkew() float64 {
	return skew(r.Replicas, func(x Replica) int { return x.Connections })
}

// RequestSkew is max/min of requests per replica within one pool (the lesson's measure).
func (r *Result) RequestSkew() float64 {
	return skew(r.Replicas, func(x Replica) int { return x.Requests })
}

// DecisionsPerRequest is balancing decisions divided by requests.
func (r *Result) DecisionsPerRequest() float64 { return float64(r.Decisions) / float64(r.Requests) }

// Imbalance is the heaviest replica's share times the replica count (1 is perfect balance), the
// factor the lesson's capacity calculation multiplies the peak rate by.
func (r *Result) Imbalance() float64 {
	maxReq, total := 0, 0
	for _, x := range r.Replicas {
		total += x.Requests
		maxReq = max(maxReq, x.Requests)
	}
	return float64(maxReq) / float64(total) * float64(len(r.Replicas))
}

func skew(rs []Replica, f func(Replica) int) float64 {
	lo, hi := math.MaxInt, 0
	for _, x := range rs {
		lo, hi = min(lo, f(x)), max(hi, f(x))
	}
	if lo == 0 {
		return math.Inf(1)
	}
	return float64(hi) / float64(lo)
}

// replica is an HTTP server on loopback counting what it sees.
type replica struct {
	name  string
	srv   *http.Server
	ln    net.Listener
	conns atomic.Int64
	mu    sync.Mutex
	paths map[string]int
}

func startReplica(name string) (*replica, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for replica %s: %w", name, err)
	}
	r := &replica{name: name, ln: ln, paths: map[string]int{}}
	r.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.mu.Lock()
			r.paths[req.URL.Path]++
			r.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Replica", name)
			io.WriteString(w, `{"state":"at transfer hub","zone":"35","step":4}`)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				r.conns.Add(1)
			}
		},
	}
	go r.srv.Serve(ln)
	return r, nil
}

// countingListener counts the client connections the proxy accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// Run performs one run with the given per-client request counts. With split, /tracking reads go
// to a pool of replicas k1 and k2 and /event writes to k3, which only an L7 tier can do; without
// it all three replicas form one round-robin pool, the lesson's arrangement.
func Run(ctx context.Context, mix []int, split bool) (*Result, error) {
	names := []string{"k1", "k2", "k3"}
	reps := make([]*replica, 0, 3)
	defer func() {
		for _, r := range reps {
			r.srv.Close()
		}
	}()
	for _, n := range names {
		r, err := startReplica(n)
		if err != nil {
			return nil, err
		}
		reps = append(reps, r)
	}
	addr := func(i int) string { return reps[i].ln.Addr().String() }
	yaml := proxyConfig(split, addr(0), addr(1), addr(2))
	cfg, err := l7.ParseConfig([]byte(yaml))
	if err != nil {
		return nil, fmt.Errorf("build experiment config: %w", err)
	}
	proxy, err := l7.NewServer(cfg, l7.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for proxy: %w", err)
	}
	ln := &countingListener{Listener: raw}
	go proxy.Serve(ln)

	res := &Result{Mix: mix, Split: split}
	base := "http://" + raw.Addr().String()
	// Clients run in sequence, each on its own single persistent connection, as in the lesson.
	for i, share := range mix {
		if err := runClient(ctx, base, i, share); err != nil {
			return nil, err
		}
		res.Requests += share
	}
	res.ClientConnections = int(ln.n.Load())
	res.Decisions = proxy.Decisions()
	for i, r := range reps {
		r.mu.Lock()
		x := Replica{Name: r.name, Connections: int(r.conns.Load()), Paths: r.paths}
		for _, n := range r.paths {
			x.Requests += n
		}
		r.mu.Unlock()
		x.Pool = "app"
		if split {
			x.Pool = map[bool]string{true: "reads", false: "writes"}[i < 2]
		}
		res.Replicas = append(res.Replicas, x)
	}
	return res, nil
}

// proxyConfig is the L7 configuration of a run over replicas at a0, a1 and a2: with split, reads
// to a pool of the first two and writes to the third; without, one round-robin pool of all.
func proxyConfig(split bool, a0, a1, a2 string) string {
	var yaml string
	if split {
		yaml = fmt.Sprintf(`listeners: [{address: "127.0.0.1:0"}]
routes:
  - {name: tracking, match: {path: {prefix: /tracking}, methods: [GET]}, pool: reads}
  - {name: event, match: {path: {prefix: /event}}, pool: writes}
pools:
  - {name: reads, balance: round_robin, backends: [{address: %q}, {address: %q}]}
  - {name: writes, balance: round_robin, backends: [{address: %q}]}
`, a0, a1, a2)
	} else {
		yaml = fmt.Sprintf(`listeners: [{address: "127.0.0.1:0"}]
routes: [{name: all, pool: app}]
pools: [{name: app, balance: round_robin, backends: [{address: %q}, {address: %q}, {address: %q}]}]
`, a0, a1, a2)
	}
	return yaml
}

// runClient sends client i's share of requests, alternating /tracking reads and /event writes,
// on one persistent connection.
func runClient(ctx context.Context, base string, i, share int) error {
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for j := 0; j < share; j++ {
		path := "/tracking"
		method := http.MethodGet
		if j%2 == 1 {
			path, method = "/event", http.MethodPost
		}
		req, err := http.NewRequestWithContext(ctx, method, fmt.Sprintf("%s%s?no=I%d-%d", base, path, i, j), nil)
		if err != nil {
			return fmt.Errorf("build request: %w", err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("client %d request %d: %w", i, j, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("client %d request %d: status %d", i, j, resp.StatusCode)
		}
	}
	return nil
}

// Table writes the lesson-style table of a run.
func (r *Result) Table(w io.Writer) {
	fmt.Fprintf(w, "%d clients, %d requests sent (shares: %s)%s\n", len(r.Mix), r.Requests, joinInts(r.Mix),
		map[bool]string{true: ", reads and writes in separate pools", false: ""}[r.Split])
	fmt.Fprintln(w, "replica  pool    connections  requests  path distribution")
	for _, x := range r.Replicas {
		keys := make([]string, 0, len(x.Paths))
		for k := range x.Paths {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%d", strings.TrimPrefix(k, "/"), x.Paths[k])
		}
		fmt.Fprintf(w, "%-7s  %-6s  %11d  %8d  %s\n", x.Name, x.Pool, x.Connections, x.Requests, strings.Join(parts, " "))
	}
	fmt.Fprintf(w, "client connections into the L7 tier = %d, decisions = %d (1 per request), decisions per request = %.3f\n",
		r.ClientConnections, r.Decisions, r.DecisionsPerRequest())
	if !r.Split {
		fmt.Fprintf(w, "connection skew = %.2f, request skew = %.2f, imbalance factor = %.3f\n",
			r.ConnectionSkew(), r.RequestSkew(), r.Imbalance())
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
