package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/internal/webui"
	"github.com/switchyard/switchyard/lab/topo"
)

// The lab's observability: one collector (internal/webui) scrapes every stop's own Prometheus
// endpoint inside its namespace, on the loopback address where the lab put it, and serves the
// live page. The same process relays each target's metrics at /targets/NAME/metrics, which is
// what the lab's Prometheus (Debian's prometheus, in the host namespace, where the stops'
// loopback listeners cannot be reached) scrapes. Both run in the host namespace on loopback.

// lbMetrics is where each balancer daemon serves /metrics (--metrics, inside its namespace).
const lbMetrics = "127.0.0.1:9100"

// Auto asks UpOptions.UI or .Prometheus for a free loopback port.
const Auto = "auto"

// Targets are the lab's scrape targets: every balancer daemon, L7 proxy, edge, DNS server and
// app server that runs, each fetched inside its namespace.
func Targets(st *State) []webui.Target {
	var out []webui.Target
	add := func(stop string, n topo.Node, addr, path string) {
		out = append(out, webui.Target{Stop: stop, Name: n.Name, URL: "http://" + addr + path, Client: nsClient(n.NS)})
	}
	for _, n := range st.Topo.ByRole(topo.Balancer) {
		if _, ok := st.Sockets[n.NS]; ok {
			add(webui.StopL4, n, lbMetrics, "/metrics")
		}
	}
	for _, n := range st.Topo.Nodes {
		switch st.Running[n.Name] {
		case "dns":
			add(webui.StopDNS, n, dnsMetrics, "/metrics")
		case "edge":
			add(webui.StopEdge, n, edgeAdminAddr, "/metrics")
		case "l7":
			add(webui.StopL7, n, l7AdminAddr, "/metrics")
		case "app":
			add(webui.StopApp, n, "127.0.0.1:80", "/admin/metrics")
		}
	}
	return out
}

// NewCollector is the lab's collector: its targets, with the hosts' names for their addresses.
func NewCollector(st *State, interval time.Duration) *webui.Collector {
	names := map[string]string{}
	for _, n := range st.Topo.Nodes {
		names[n.Addr4.String()], names[n.Addr6.String()] = n.Name, n.Name
	}
	return webui.NewCollector(Targets(st), webui.Options{Interval: interval, Names: names,
		Title: fmt.Sprintf("switchyard lab %q", st.Prefix)})
}

// startObserve starts the web view (`switchyard lab ui`) and, when asked and installed,
// Prometheus, and records their addresses. A lab that is up keeps the addresses it has.
func startObserve(o UpOptions, st *State, old *State, start func(name, ns string, argv ...string) error) error {
	if o.UI == "" && o.Prometheus == "" {
		return nil
	}
	ui, err := pickAddr(o.UI, old, func(s *State) string { return s.UI })
	if err != nil {
		return err
	}
	if err := start("ui", "", o.Exe, "lab", "ui", "--prefix", st.Prefix, "--listen", ui); err != nil {
		return err
	}
	st.UI = "http://" + ui + "/"
	if o.Prometheus == "" {
		return nil
	}
	prom, err := exec.LookPath("prometheus")
	if err != nil {
		st.Notes = append(st.Notes, "no Prometheus: it is not installed (apt-get install -y prometheus, or `make deps`)")
		return nil
	}
	addr, err := pickAddr(o.Prometheus, old, func(s *State) string { return strings.TrimSuffix(strings.TrimPrefix(s.Prometheus, "http://"), "/") })
	for err == nil && addr == ui && o.Prometheus == Auto { // the web view may not have bound its port yet
		addr, err = freeLoopbackAddr()
	}
	if err != nil {
		return err
	}
	cfg, err := writeConfig(st.Prefix, "prometheus", PrometheusConfig(st, ui))
	if err != nil {
		return err
	}
	// The state directory is on /run (memory): the retention bounds what a long-lived lab keeps.
	argv := []string{prom, "--config.file=" + cfg, "--storage.tsdb.path=" + filepath.Join(StateDir(st.Prefix), "prometheus"),
		"--storage.tsdb.retention.time=1d", "--storage.tsdb.retention.size=256MB", "--web.listen-address=" + addr, "--log.level=warn"}
	if err := start("prometheus", "", argv...); err != nil {
		return err
	}
	st.Prometheus = "http://" + addr + "/"
	return nil
}

// pickAddr is the listen address of want: a free loopback port for Auto (the one the lab had,
// when it is up), else want itself.
func pickAddr(want string, old *State, was func(*State) string) (string, error) {
	if want != Auto {
		return want, nil
	}
	if old != nil {
		if a := strings.TrimSuffix(strings.TrimPrefix(was(old), "http://"), "/"); a != "" {
			return a, nil
		}
	}
	return freeLoopbackAddr()
}

// freeLoopbackAddr is a loopback address whose port is free now, chosen below the kernel's
// ephemeral range: the web view and Prometheus bind it a moment later in another process, and a
// port from the ephemeral range can be taken meanwhile as the local end of any outgoing
// connection (with many tests running, that happened).
func freeLoopbackAddr() (string, error) {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 20000 {
				lo = n
			}
		}
	}
	const first = 20000
	for range 200 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(first+rand.IntN(lo-first)))
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			return addr, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // the range below is full: take the kernel's pick
	if err != nil {
		return "", fmt.Errorf("pick a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// PrometheusConfig scrapes every target of the lab every second through the web view's relay
// at ui, one job per stop (dns, edge, l4, l7, app), with the host's name as instance.
func PrometheusConfig(st *State, ui string) string {
	jobs := map[string][]string{}
	var order []string
	for _, t := range Targets(st) {
		if jobs[t.Stop] == nil {
			order = append(order, t.Stop)
		}
		jobs[t.Stop] = append(jobs[t.Stop], fmt.Sprintf("      - targets: [%q]\n        labels: {__metrics_path__: %q, instance: %q}\n",
			ui, "/targets/"+t.Name+"/metrics", t.Name))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# written by `switchyard lab up` for lab %q\nglobal: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n", st.Prefix)
	for _, j := range order {
		fmt.Fprintf(&b, "  - job_name: %s\n    static_configs:\n%s", j, strings.Join(jobs[j], ""))
	}
	return b.String()
}

// waitObserve waits until the web view answers and Prometheus is ready.
func waitObserve(st *State, d time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	check := func(url string) error {
		resp, err := hc.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	deadline := time.Now().Add(d)
	for _, u := range []string{st.UI, st.Prometheus + "-/ready"} {
		if u == "" || u == "-/ready" {
			continue
		}
		for {
			err := check(u)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s does not answer after %s: %w (see ui.log and prometheus.log in %s)", u, d, err, StateDir(st.Prefix))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// ServeUI is `switchyard lab ui`: the lab's collector and page on addr until ctx ends.
func ServeUI(ctx context.Context, prefix, addr string) error {
	st, err := LoadState(prefix)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("lab ui: listen on %s: %w (is the port in use? pick another with --ui)", addr, err)
	}
	c := NewCollector(st, time.Second)
	go c.Run(ctx)
	srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		srv.Close() // event streams do not end by themselves
	}()
	fmt.Fprintf(os.Stderr, "lab ui: http://%s/ (%d targets)\n", ln.Addr(), len(c.Targets()))
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("lab ui: %w", err)
	}
	return nil
}

// printObserve says where the web view and Prometheus listen.
func (s *Status) printObserve(w io.Writer) {
	if s.UI != "" {
		fmt.Fprintf(w, "\nlive view:  %s (every stop's metrics, updated every second)\n", s.UI)
	}
	if s.Prometheus != "" {
		fmt.Fprintf(w, "prometheus: %s (scrapes every stop each second; Grafana dashboard in deploy/grafana/)\n", s.Prometheus)
	}
}
