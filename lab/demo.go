package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/topo"
)

// DemoOptions tune `switchyard lab demo`.
type DemoOptions struct {
	// Duration bounds the traffic (the demo never runs unbounded).
	Duration time.Duration
	// Interval between two views.
	Interval time.Duration
	// Rate is the total requests per second the clients send.
	Rate int
	// Live redraws one screen (a terminal); otherwise one line per interval is printed.
	Live bool
}

// Target is one kind of request the demo sends: a name, a base URL, the paths it cycles and
// the stops it passes.
type Target struct {
	Name  string
	URL   string
	Paths []string
	Route string
	// Proto is what an https target must be answered over: "HTTP/1.1" or "HTTP/2.0" (ALPN).
	Proto string
}

// DemoTargets are the requests of the demo: the XDP VIP over IPv4 and IPv6, the L7 VIP when the
// lab has an L7 tier and, when DNS and the edge cache run, the whole path: static.lab.test
// resolved by the lab's DNS server to the edge cache, whose misses go to the L7 VIP (XDP), the
// L7 proxies and the app servers, and www.lab.test, the app's name, to the L7 VIP.
func DemoTargets(st *State) []Target {
	var out []Target
	if st.Running["dns"] == "dns" && st.Running["edge"] == "edge" {
		out = append(out, Target{Name: "static", URL: "http://" + StaticName, Paths: []string{"/static/logo.png", "/asset/app.js", "/static/app.js", "/asset/style.css"},
			Route: "DNS static.lab.test -> edge cache (hit ends here) -> L7 VIP (XDP) -> L7 proxy -> app"})
		if st.ACME != nil && st.ACME.Root != "" {
			for _, p := range []struct{ name, proto, label string }{{"https", "HTTP/1.1", "HTTP/1.1"}, {"h2", "HTTP/2.0", "HTTP/2"}} {
				out = append(out, Target{Name: p.name, URL: "https://" + StaticName, Paths: []string{"/static/logo.png", "/asset/app.js"}, Proto: p.proto,
					Route: fmt.Sprintf("DNS static.lab.test -> edge over TLS (%s; certificate by ACME from Pebble) -> L7 VIP -> L7 proxy -> app", p.label)})
			}
		}
	}
	if h3Ready(st) {
		out = append(out, Target{Name: "l7tls", URL: "https://" + AppName, Paths: []string{"/tracking", "/event"}, Proto: "HTTP/1.1",
			Route: "DNS app.lab.test -> L7 VIP :443 (XDP) -> L7 proxy over TLS (certificate by ACME from Pebble) -> app"})
	}
	if st.Running["dns"] == "dns" {
		out = append(out, Target{Name: "www", URL: "http://" + WWWName, Paths: []string{"/tracking", "/event"},
			Route: "DNS www.lab.test (failover) -> L7 VIP (XDP) -> L7 proxy -> app"})
	}
	for _, v := range st.VIPs {
		if v.Protocol != "tcp" || v.Name == "l7tls" { // the https target above
			continue
		}
		host := v.Address
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		route := "XDP VIP -> app (DSR)"
		if v.Name == "l7" {
			route = "XDP VIP -> L7 host -> app"
			if anyRunning(st, "l7") {
				route = "XDP VIP -> L7 proxy -> app"
			}
		}
		out = append(out, Target{Name: v.Name, URL: fmt.Sprintf("http://%s:%d", host, v.Port), Paths: []string{"/tracking", "/event"}, Route: route})
	}
	return out
}

type sent struct {
	ok, failed, edgeHits atomic.Int64
}

// Demo sends bounded traffic from every client to the lab's VIPs and shows, every interval,
// where it goes: requests per second and open connections per backend, as the backends count
// them. It returns when ctx ends or the duration passes.
func Demo(ctx context.Context, st *State, w io.Writer, o DemoOptions) error {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 100
	}
	if o.Duration <= 0 {
		o.Duration = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	targets := DemoTargets(st)
	if len(targets) == 0 {
		return fmt.Errorf("demo: the lab has no TCP VIP")
	}
	l := st.Lab()
	var stats = map[string]*sent{}
	for _, t := range targets {
		stats[t.Name] = &sent{}
	}
	// One token per request: the clients share a fixed rate, so the load is bounded in count
	// (rate x duration) as well as in time.
	tokens := make(chan struct{})
	go func() {
		tk := time.NewTicker(time.Second / time.Duration(o.Rate))
		defer tk.Stop()
		for {
			select {
			case <-ctx.Done():
				close(tokens)
				return
			case <-tk.C:
				select {
				case tokens <- struct{}{}:
				default: // every worker busy: skip rather than queue
				}
			}
		}
	}()
	var wg sync.WaitGroup
	clients := l.Topo.ByRole(topo.Client)
	// Four workers per client, more when there are more targets, so that each gets one.
	perClient := max(4, (len(targets)+len(clients)-1)/len(clients))
	for i, c := range clients {
		for j := 0; j < perClient; j++ {
			wg.Add(1)
			go func(c topo.Node, k int) {
				defer wg.Done()
				demoWorker(ctx, st, c, targets[k%len(targets)], stats[targets[k%len(targets)].Name], tokens)
			}(c, i*perClient+j)
		}
	}
	view := newView(st, clients[0], targets, fmt.Sprintf("%d requests/s in total, shared by %d clients x %d workers", o.Rate, len(clients), perClient))
	tk := time.NewTicker(o.Interval)
	defer tk.Stop()
	start := time.Now()
	view.sample()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			h3 := demoH3(st, clients[0]) // before the last sample: the summary counts its packets
			view.sample()
			view.summary(w, time.Since(start), stats)
			io.WriteString(w, h3)
			return nil
		case <-tk.C:
			view.sample()
			view.render(w, time.Since(start), stats, o.Live)
		}
	}
}

// demoWorker sends one request per token over keep-alive connections that it renews every 25
// requests, so that new connections keep being spread by the balancer.
func demoWorker(ctx context.Context, st *State, c topo.Node, t Target, s *sent, tokens <-chan struct{}) {
	n := 0
	var hc *http.Client
	for range tokens {
		if hc == nil || n%25 == 0 {
			if hc != nil {
				hc.CloseIdleConnections()
			}
			hc = demoClient(st, c, t)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.URL+t.Paths[n%len(t.Paths)], nil)
		n++
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			s.failed.Add(1)
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Header.Get("X-Cache") == "HIT" {
			s.edgeHits.Add(1)
		}
		if resp.StatusCode == http.StatusOK && (t.Proto == "" || resp.Proto == t.Proto) {
			s.ok.Add(1)
		} else {
			s.failed.Add(1)
		}
	}
	if hc != nil {
		hc.CloseIdleConnections()
	}
}

// demoClient is a worker's client: from client namespace c, resolving with the lab's DNS, and
// for an https target trusting the root of the lab's ACME CA, with HTTP/2 offered by ALPN for
// an HTTP/2 target only.
func demoClient(st *State, c topo.Node, t Target) *http.Client {
	hc := HTTPClient(c, true, 5*time.Second)
	tr := hc.Transport.(*http.Transport)
	if dns, ok := st.Topo.Node("dns"); ok {
		tr.DialContext = DialViaDNS(c, dns.Addr4)
	}
	if t.Proto != "" {
		tr.TLSClientConfig, _ = st.ClientTLS() // DemoTargets lists https targets only with the root saved
		tr.ForceAttemptHTTP2 = t.Proto == "HTTP/2.0"
	}
	return hc
}

// view reads every app server's counters (from a client namespace, straight to the server's
// own address, so that the reading goes through no balancer and is not counted) and the stops'
// own counters (demostops.go), and renders the rates.
type view struct {
	hosts   []topo.Node
	st      *State
	targets []Target
	load    string
	hc      *http.Client
	prev    map[string]app.Counters
	cur     map[string]app.Counters
	first   map[string]app.Counters
	prevT   time.Time
	curT    time.Time
	// smooth is each backend's request rate, an exponential average over smoothing: the load
	// rides on a few keep-alive connections (renewed every 25 requests), so the per-second
	// share of one backend jumps as connections move.
	smooth     map[string]float64
	stops      [3]stopTotals // first, previous, current
	stopsDT    float64
	hasSamples bool
	startT     time.Time
}

// smoothing is the time constant of the per-backend rates.
const smoothing = 5 * time.Second

func newView(st *State, from topo.Node, targets []Target, load string) *view {
	v := &view{st: st, targets: targets, load: load, hc: HTTPClient(from, true, 2*time.Second), smooth: map[string]float64{}}
	for _, n := range st.Topo.Nodes {
		if st.Running[n.Name] == "app" {
			v.hosts = append(v.hosts, n)
		}
	}
	return v
}

func (v *view) sample() {
	v.prev, v.prevT = v.cur, v.curT
	v.cur, v.curT = map[string]app.Counters{}, time.Now()
	for _, n := range v.hosts {
		c, err := FetchCounters(v.hc, n)
		if err == nil {
			v.cur[n.Name] = c
		}
	}
	s := sampleStops(v.st)
	if v.first == nil {
		v.first, v.stops[0], v.stops[2], v.startT = v.cur, s, s, v.curT
		return
	}
	v.stops[1], v.stops[2] = v.stops[2], s
	dt := v.curT.Sub(v.prevT).Seconds()
	v.stopsDT, v.hasSamples = dt, true
	for name, c := range v.cur {
		p, ok := v.prev[name]
		if !ok || dt <= 0 {
			continue
		}
		old, seen := v.smooth[name]
		v.smooth[name] = smoothRate(old, seen, float64(c.Requests-p.Requests)/dt, dt)
	}
}

// smoothRate moves an exponential average of a rate toward the rate inst measured over the
// last dt seconds, with the time constant smoothing (the first measurement starts it).
func smoothRate(old float64, seen bool, inst, dt float64) float64 {
	if !seen {
		return inst
	}
	return old + (1-math.Exp(-dt/smoothing.Seconds()))*(inst-old)
}

// FetchCounters reads an app server's counters over HTTP at its own address.
func FetchCounters(hc *http.Client, n topo.Node) (app.Counters, error) {
	var c app.Counters
	resp, err := hc.Get(fmt.Sprintf("http://%s/admin/counters", n.Addr4))
	if err != nil {
		return c, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("counters of %s: status %d", n.Name, resp.StatusCode)
	}
	return c, json.NewDecoder(resp.Body).Decode(&c)
}

func (v *view) render(w io.Writer, elapsed time.Duration, stats map[string]*sent, live bool) {
	sum := clientSummary(stats)
	if !live {
		var parts []string
		for _, n := range v.hosts {
			c, ok := v.cur[n.Name]
			if !ok {
				parts = append(parts, n.Name+" down")
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %.0f r/s %d conns", n.Name, v.smooth[n.Name], c.Open))
		}
		if st := v.stopLines(false); len(st) > 0 {
			parts = append(parts, strings.Join(st, " "))
		}
		fmt.Fprintf(w, "t=%4.0fs | %s | %s\n", elapsed.Seconds(), strings.Join(parts, " | "), strings.Join(sum, " "))
		return
	}
	var b strings.Builder
	b.WriteString("\033[H\033[2J")
	fmt.Fprintf(&b, "switchyard lab demo: %s elapsed (Ctrl-C stops, prints a summary and tears down)\n", elapsed.Round(time.Second))
	fmt.Fprintf(&b, "load: %s, along:\n", v.load)
	for _, t := range v.targets {
		fmt.Fprintf(&b, "  %-5s %-28s %s\n", t.Name, t.URL, t.Route)
	}
	fmt.Fprintf(&b, "\napp servers (REQ/S averaged over %s: the load rides on keep-alive connections renewed every\n25 requests, so one backend's share moves in steps as connections land):\n", smoothing)
	fmt.Fprintf(&b, "%-6s %-8s %10s %12s %12s  %s\n", "HOST", "ROLE", "REQ/S", "OPEN CONNS", "REQUESTS", "PATHS")
	for _, n := range v.hosts {
		c, ok := v.cur[n.Name]
		if !ok {
			fmt.Fprintf(&b, "%-6s %-8s %10s\n", n.Name, n.Role, "DOWN")
			continue
		}
		rate := v.smooth[n.Name]
		bar := strings.Repeat("#", min(40, int(rate/5)))
		fmt.Fprintf(&b, "%-6s %-8s %10.1f %12d %12d  %s %s\n", n.Name, n.Role, rate, c.Open, c.Requests, app.SortedPaths(c.Paths), bar)
	}
	if st := v.stopLines(true); len(st) > 0 {
		fmt.Fprintf(&b, "\nthe stops, as each counts (per second over the last %s):\n", time.Duration(v.stopsDT*float64(time.Second)).Round(100*time.Millisecond))
		for _, l := range st {
			fmt.Fprintf(&b, "  %s\n", l)
		}
	}
	fmt.Fprintf(&b, "\nclients (sent since the start): %s\n", strings.Join(sum, " | "))
	io.WriteString(w, b.String())
}

func clientSummary(stats map[string]*sent) []string {
	var names []string
	for k := range stats {
		names = append(names, k)
	}
	sort.Strings(names)
	var sum []string
	for _, k := range names {
		x := fmt.Sprintf("%s ok=%d failed=%d", k, stats[k].ok.Load(), stats[k].failed.Load())
		if h := stats[k].edgeHits.Load(); h > 0 {
			x += fmt.Sprintf(" edge-hits=%d", h)
		}
		sum = append(sum, x)
	}
	return sum
}

// stopLines renders the stops' rates between the last two samples (long: one line per stop
// with every VIP and pool; short: one phrase per stop for the plain output).
func (v *view) stopLines(long bool) []string {
	if !v.hasSamples || v.stopsDT <= 0 {
		return nil
	}
	p, c := v.stops[1], v.stops[2]
	return renderStops(p, c, v.stopsDT, long, v.st.Balancer)
}

func renderStops(p, c stopTotals, dt float64, long bool, mode string) []string {
	per := func(a, b float64) float64 { return max(0, b-a) / dt }
	var out []string
	if len(c.lbPackets) > 0 {
		var vips []string
		total := 0.0
		for _, k := range sortedKeys(c.lbPackets) {
			r := per(p.lbPackets[k], c.lbPackets[k])
			total += r
			vips = append(vips, fmt.Sprintf("%s %.0f", k, r))
		}
		if long {
			out = append(out, fmt.Sprintf("%-9s XDP packets/s by VIP: %s; %d connection-table entries", "balancer", strings.Join(vips, ", "), int(c.lbFlows)))
		} else {
			out = append(out, fmt.Sprintf("lb %.0f pkt/s", total))
		}
	} else if long && mode == ModeDirect {
		out = append(out, fmt.Sprintf("%-9s direct mode: no daemon to ask (its counters are in `switchyard lb stats` with --balancer daemon)", "balancer"))
	}
	if len(c.l7Requests) > 0 {
		var pools []string
		total := 0.0
		for _, k := range sortedKeys(c.l7Requests) {
			r := per(p.l7Requests[k], c.l7Requests[k])
			total += r
			pools = append(pools, fmt.Sprintf("%s %.1f", k, r))
		}
		if long {
			out = append(out, fmt.Sprintf("%-9s requests/s by pool: %s", "l7", strings.Join(pools, ", ")))
		} else {
			out = append(out, fmt.Sprintf("l7 %.0f r/s", total))
		}
	}
	if c.edgeHits+c.edgeMisses > 0 {
		h, m := per(p.edgeHits, c.edgeHits), per(p.edgeMisses, c.edgeMisses)
		ratio := 0.0
		if h+m > 0 {
			ratio = 100 * h / (h + m)
		}
		if long {
			out = append(out, fmt.Sprintf("%-9s hits/s %.1f, misses/s %.1f, hit ratio %.0f%%", "edge", h, m, ratio))
		} else {
			out = append(out, fmt.Sprintf("edge %.0f%% hits", ratio))
		}
	}
	if c.dnsQueries > 0 {
		if long {
			out = append(out, fmt.Sprintf("%-9s queries/s %.1f", "dns", per(p.dnsQueries, c.dnsQueries)))
		} else {
			out = append(out, fmt.Sprintf("dns %.1f q/s", per(p.dnsQueries, c.dnsQueries)))
		}
	}
	if long && len(c.missing) > 0 {
		out = append(out, "not answering: "+strings.Join(c.missing, ", "))
	}
	return out
}

func sortedKeys(m map[string]float64) []string {
	var k []string
	for x := range m {
		k = append(k, x)
	}
	sort.Strings(k)
	return k
}

// summary is printed when the demo ends: what was sent, where it went over the whole run, and
// what each stop counted.
func (v *view) summary(w io.Writer, elapsed time.Duration, stats map[string]*sent) {
	var ok, failed int64
	for _, s := range stats {
		ok, failed = ok+s.ok.Load(), failed+s.failed.Load()
	}
	fmt.Fprintf(w, "\nsummary after %s: %d requests answered 200, %d failed (%.1f requests/s; the load: %s)\n", elapsed.Round(time.Second), ok, failed,
		float64(ok+failed)/max(elapsed.Seconds(), 1), v.load)
	fmt.Fprintf(w, "  clients:  %s\n", strings.Join(clientSummary(stats), " | "))
	var total int64
	for _, n := range v.hosts {
		total += v.cur[n.Name].Requests - v.first[n.Name].Requests
	}
	var bes []string
	for _, n := range v.hosts {
		d := v.cur[n.Name].Requests - v.first[n.Name].Requests
		share := 0.0
		if total > 0 {
			share = 100 * float64(d) / float64(total)
		}
		bes = append(bes, fmt.Sprintf("%s %d (%.0f%%)", n.Name, d, share))
	}
	fmt.Fprintf(w, "  app servers (requests during the demo): %s\n", strings.Join(bes, ", "))
	if d := v.curT.Sub(v.startT).Seconds(); d > 0 {
		for _, l := range renderStops(v.stops[0], v.stops[2], d, true, v.st.Balancer) {
			fmt.Fprintf(w, "  %s (average over the demo)\n", l)
		}
	}
}

// DialViaDNS returns a DialContext that starts connections in client namespace c and resolves
// names with the lab's DNS server at dns:53 (also from c), the way a real client reaches the
// lab's services by name.
func DialViaDNS(c topo.Node, dns netip.Addr) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := namednetns.Dialer(c.NS, &net.Dialer{Timeout: 5 * time.Second})
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ip, err := resolveViaDNS(ctx, c, dns, host)
		if err != nil {
			return nil, err
		}
		return d(ctx, network, net.JoinHostPort(ip.String(), port))
	}
}

// resolveViaDNS is host's IPv4 address as the lab's DNS server at dns:53 answers client c (an
// address is its own answer).
func resolveViaDNS(ctx context.Context, c topo.Node, dns netip.Addr, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, nil
	}
	d := namednetns.Dialer(c.NS, &net.Dialer{Timeout: 5 * time.Second})
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d(ctx, network, netip.AddrPortFrom(dns, 53).String())
	}}
	ips, err := r.LookupNetIP(ctx, "ip4", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("resolve %s at the lab's DNS %s: %w", host, dns, err)
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("resolve %s: no address", host)
	}
	return ips[0].Unmap(), nil
}

// h3Ready reports whether the L7 tier serves app.lab.test over TLS and HTTP/3 behind the
// balancer's QUIC VIP, with a certificate whose root the lab saved.
func h3Ready(st *State) bool {
	return st.ACME != nil && st.ACME.Root != "" && anyRunning(st, "l7") && st.Lab().VIP("l7quic").QUIC
}

// demoH3 runs the migrating HTTP/3 client (h3migrate.go) once from client c and says, in a
// line of the summary, what it saw ("" when the lab serves no HTTP/3).
func demoH3(st *State, c topo.Node) string {
	if !h3Ready(st) {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	head := fmt.Sprintf("  http/3:   %s over QUIC from %s through the balancer, moving to a new UDP port 3 times: ", AppName, c.Name)
	rep, err := H3Migration(ctx, st, c, 3)
	if err != nil {
		return head + "FAILED: " + err.Error() + "\n"
	}
	return head + rep.String() + "\n"
}

func anyRunning(st *State, what string) bool {
	for _, v := range st.Running {
		if v == what {
			return true
		}
	}
	return false
}
