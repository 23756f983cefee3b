// Command l4 is the L4 benchmark's driver (bench/l4.sh runs it as root): in a lab of its own it
// sends the same wrk load (keep-alive, then a new connection per request) to the same two
// backends directly, through switchyard's XDP VIP, through an nftables DNAT balancer and through
// HAProxy in TCP mode, in alternating rounds, and prints requests/s, p99 and the balancer's CPU
// per request, with ratios; the results go to a flat JSON object.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/loader"
	"github.com/switchyard/switchyard/testenv/fwd"
	"github.com/switchyard/switchyard/testenv/lab"
	"github.com/switchyard/switchyard/testenv/topo"
)

var (
	modes   = []string{"direct", "xdp", "nft", "haproxy"}
	xdpMode = "native"
)

// result is one wrk run.
type result struct {
	rps, p99ms float64
	requests   int64
	// lbCPU is the balancer's CPU time (XDP program run time, HAProxy process time); sysCPU is
	// every CPU's busy time on the machine during the run.
	lbCPU, sysCPU time.Duration
	lbKnown       bool
}

type bench struct {
	l       *lab.Lab
	c1, lb  topo.Node
	bes     []topo.Node
	work    string
	dur     time.Duration
	conns   int
	threads int
	fw      *fwd.Forwarder
	hap     *exec.Cmd
}

func main() {
	rounds := flag.Int("rounds", 3, "rounds per mode and load (alternating)")
	dur := flag.Duration("duration", 5*time.Second, "wrk duration of one run")
	conns := flag.Int("connections", 50, "wrk connections")
	out := flag.String("out", "bench/out/l4.json", "flat JSON result file")
	only := flag.String("modes", strings.Join(modes, ","), "comma-separated subset of direct,xdp,nft,haproxy")
	flag.StringVar(&xdpMode, "xdp-mode", "native", "attach mode of the forwarder: native or generic")
	flag.Parse()
	modes = strings.Split(*only, ",")
	if err := run(*rounds, *dur, *conns, *out); err != nil {
		fmt.Fprintln(os.Stderr, "l4 bench:", err)
		os.Exit(1)
	}
}

func run(rounds int, dur time.Duration, conns int, outPath string) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces, XDP)")
	}
	if rounds < 1 || rounds > 10 || dur < time.Second || dur > 30*time.Second {
		return errors.New("bounded runs only: 1..10 rounds of 1s..30s")
	}
	l, err := lab.Plan(lab.Spec{Prefix: lab.TempPrefix("bl"), Clients: 1, Balancers: 1, Backends: 2})
	if err != nil {
		return err
	}
	defer lab.Destroy(l.Topo.Prefix)
	if err := l.Build(); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "switchyard-l4-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := l.StartApps(ctx); err != nil {
		return err
	}
	b := &bench{l: l, c1: l.Client(1), lb: l.Balancer(), bes: l.Topo.ByRole(topo.Backend), work: work, dur: dur, conns: conns, threads: 2}
	// HAProxy binds the VIP: it must be a local address of the balancer for that mode (the XDP
	// forwarder and the DNAT rules act before the local delivery, so it does no harm there).
	if err := topo.AddLoopback(b.lb.NS, lab.WebVIP4); err != nil {
		return err
	}
	if err := topo.Sysctl(b.lb.NS, "net.ipv4.ip_forward", "1"); err != nil {
		return err
	}
	// The new-connection runs open tens of thousands of connections: the widest port range for
	// the client and for the proxies' own connections to the backends, the same for every path.
	for _, ns := range []string{b.c1.NS, b.lb.NS} {
		if err := topo.Sysctl(ns, "net.ipv4.ip_local_port_range", "1024 65535"); err != nil {
			return err
		}
	}
	// A NAT balancer (nftables masquerade) reuses its own ports toward the backends, whose
	// TIME_WAIT sockets of an earlier round then answer the new SYN with an ACK that conntrack
	// drops: the connection stalls a second. Capping TIME_WAIT on the backends (the same for
	// every path) keeps rounds independent of each other.
	for _, n := range b.bes {
		if err := topo.Sysctl(n.NS, "net.ipv4.tcp_max_tw_buckets", "4096"); err != nil {
			return err
		}
	}
	// BPF run-time stats give the forwarder's CPU time; restore the machine's setting after.
	const statsKnob = "/proc/sys/kernel/bpf_stats_enabled"
	prev, err := os.ReadFile(statsKnob)
	if err != nil {
		return fmt.Errorf("read bpf stats setting: %w", err)
	}
	if err := os.WriteFile(statsKnob, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable bpf stats: %w", err)
	}
	defer os.WriteFile(statsKnob, prev, 0o644)

	res := map[string][]result{}
	fmt.Printf("L4 benchmark: %d rounds x %d modes x 2 loads, wrk -t%d -c%d -d%s, 2 backends, %d CPUs\n",
		rounds, len(modes), b.threads, conns, dur, runtime.NumCPU())
	for r := 0; r < rounds; r++ {
		order := rotate(modes, r) // alternate which mode goes first
		for _, m := range order {
			for _, load := range []string{"keepalive", "newconn"} {
				if err := b.setup(m); err != nil {
					return fmt.Errorf("set up %s: %w", m, err)
				}
				x, err := b.measure(m, load == "newconn")
				b.teardown(m)
				if err != nil {
					return fmt.Errorf("%s %s: %w", m, load, err)
				}
				fmt.Printf("round %d %-8s %-9s %9.0f req/s  p99 %6.2f ms\n", r+1, m, load, x.rps, x.p99ms)
				res[m+"/"+load] = append(res[m+"/"+load], x)
			}
		}
	}
	return report(res, rounds, dur, conns, outPath)
}

func rotate(s []string, k int) []string {
	k %= len(s)
	return append(append([]string{}, s[k:]...), s[:k]...)
}

// setup points the VIP at the mode's path.
func (b *bench) setup(mode string) error {
	rt := b.l.Topo.RouterNS
	vipNet := netip.PrefixFrom(lab.WebVIP4, 32)
	switch mode {
	case "direct":
		// The router sends the VIP straight to the backends (ECMP on the 5-tuple): no balancer
		// on the path, the limit of the others.
		return topo.SetRoute(rt, vipNet, []netip.Addr{b.bes[0].Addr4, b.bes[1].Addr4})
	case "xdp":
		if err := topo.SetRoute(rt, vipNet, []netip.Addr{b.lb.Addr4}); err != nil {
			return err
		}
		seg := b.l.Topo.Segment(b.lb.Segment)
		mac, _ := net.ParseMAC(seg.RouterMAC)
		f, err := fwd.Start(fwd.Options{NS: b.lb.NS, Iface: b.lb.Iface, NextHopMAC: mac, Mode: loader.Mode(xdpMode), Src4: lab.Encap4, Src6: lab.Encap6})
		if err != nil {
			return err
		}
		b.fw = f
		v := b.l.VIP("web")
		return f.SetVIP(v.Key, v.ID, 0, []fwd.Backend{{Addr: b.bes[0].Addr4, Weight: 1}, {Addr: b.bes[1].Addr4, Weight: 1}})
	case "nft":
		if err := topo.SetRoute(rt, vipNet, []netip.Addr{b.lb.Addr4}); err != nil {
			return err
		}
		// A DNAT balancer: a random backend per new connection, source NAT so that replies
		// come back through it (it must undo the DNAT).
		rules := fmt.Sprintf(`table ip sybench {
  chain pre {
    type nat hook prerouting priority dstnat;
    ip daddr %s tcp dport 80 dnat to numgen random mod 2 map { 0 : %s, 1 : %s }
  }
  chain post {
    type nat hook postrouting priority srcnat;
    ip daddr { %s, %s } masquerade
  }
}
`, lab.WebVIP4, b.bes[0].Addr4, b.bes[1].Addr4, b.bes[0].Addr4, b.bes[1].Addr4)
		p := filepath.Join(b.work, "nft.conf")
		if err := os.WriteFile(p, []byte(rules), 0o600); err != nil {
			return err
		}
		return nsexec(b.lb.NS, "nft", "-f", p)
	case "haproxy":
		if err := topo.SetRoute(rt, vipNet, []netip.Addr{b.lb.Addr4}); err != nil {
			return err
		}
		cfg := fmt.Sprintf(`global
  maxconn 8000
defaults
  mode tcp
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend vip
  bind %s:80
  default_backend be
backend be
  balance roundrobin
  server be1 %s:80
  server be2 %s:80
`, lab.WebVIP4, b.bes[0].Addr4, b.bes[1].Addr4)
		p := filepath.Join(b.work, "haproxy.cfg")
		if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
			return err
		}
		cmd := exec.Command("nsenter", "--net="+topo.NSPath(b.lb.NS), "--", "haproxy", "-db", "-f", p)
		logf, err := os.Create(filepath.Join(b.work, "haproxy.log"))
		if err != nil {
			return err
		}
		defer logf.Close()
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start haproxy: %w", err)
		}
		b.hap = cmd
		// Wait until it listens.
		for i := 0; i < 50; i++ {
			if c, err := topo.Dialer(b.lb.NS, &net.Dialer{Timeout: time.Second})(context.Background(), "tcp", lab.WebVIP4.String()+":80"); err == nil {
				c.Close()
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
		log, _ := os.ReadFile(filepath.Join(b.work, "haproxy.log"))
		return fmt.Errorf("haproxy did not listen within 5s: %s", log)
	}
	return fmt.Errorf("unknown mode %s", mode)
}

func (b *bench) teardown(mode string) {
	switch mode {
	case "xdp":
		if b.fw != nil {
			b.fw.Close() // unpinned: closing detaches
			b.fw = nil
		}
	case "nft":
		nsexec(b.lb.NS, "nft", "delete", "table", "ip", "sybench")
		// Without this, the next nft round starts with tens of thousands of TIME_WAIT entries
		// of this one and new connections stall on port reuse: a fair round starts clean.
		topo.FlushConntrack(b.lb.NS)
	case "haproxy":
		if b.hap != nil {
			b.hap.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { b.hap.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(3 * time.Second):
				b.hap.Process.Kill()
				<-done
			}
			b.hap = nil
		}
	}
	time.Sleep(300 * time.Millisecond) // let TIME_WAIT and conntrack settle between runs
}

func nsexec(ns string, argv ...string) error {
	out, err := exec.Command("nsenter", append([]string{"--net=" + topo.NSPath(ns), "--"}, argv...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, out)
	}
	return nil
}

var (
	reRPS  = regexp.MustCompile(`Requests/sec:\s+([\d.]+)`)
	reP99  = regexp.MustCompile(`\s99%\s+([\d.]+)(us|ms|s)\b`)
	reReqs = regexp.MustCompile(`(\d+) requests in`)
	reErr  = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
)

// measure runs wrk once from the client namespace and the CPU counters around it.
func (b *bench) measure(mode string, newConn bool) (result, error) {
	args := []string{"--net=" + topo.NSPath(b.c1.NS), "--", "wrk", "-t" + strconv.Itoa(b.threads), "-c" + strconv.Itoa(b.conns),
		"-d" + strconv.Itoa(int(b.dur.Seconds())) + "s", "--timeout", "5s", "--latency"}
	if newConn {
		args = append(args, "-H", "Connection: close")
	}
	args = append(args, "http://"+lab.WebVIP4.String()+"/")
	lb0, known := b.lbCPU()
	sys0 := sysBusy()
	out, err := exec.Command("nsenter", args...).CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	lb1, _ := b.lbCPU()
	sys1 := sysBusy()
	s := string(out)
	var r result
	if m := reRPS.FindStringSubmatch(s); m != nil {
		r.rps, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reP99.FindStringSubmatch(s); m != nil {
		v, _ := strconv.ParseFloat(m[1], 64)
		switch m[2] {
		case "us":
			v /= 1000
		case "s":
			v *= 1000
		}
		r.p99ms = v
	}
	if m := reReqs.FindStringSubmatch(s); m != nil {
		r.requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if r.rps == 0 || r.requests == 0 {
		return r, fmt.Errorf("wrk gave no result: %s", s)
	}
	if m := reErr.FindStringSubmatch(s); m != nil {
		// Failed requests would flatter a balancer: refuse the run instead.
		var n int64
		for _, x := range m[1:] {
			v, _ := strconv.ParseInt(x, 10, 64)
			n += v
		}
		if n > r.requests/100 {
			return r, fmt.Errorf("%d socket errors in %d requests: %s", n, r.requests, s)
		}
	}
	r.lbCPU, r.lbKnown = lb1-lb0, known
	r.sysCPU = sys1 - sys0
	return r, nil
}

// lbCPU is the balancer's own CPU time so far: the XDP program's run time (bpf stats) or the
// HAProxy process's user+system time. The nftables path runs in softirq and cannot be told
// apart from the rest of the kernel's packet work, so it has none (see sysCPU).
func (b *bench) lbCPU() (time.Duration, bool) {
	switch {
	case b.fw != nil:
		st, err := b.fw.Program().Objs.XdpLb.Stats()
		if err != nil {
			return 0, false
		}
		return st.Runtime, true
	case b.hap != nil:
		return procCPU(b.hap.Process.Pid), true
	}
	return 0, false
}

// procCPU reads a process's utime+stime.
func procCPU(pid int) time.Duration {
	bs, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(bs)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100)
}

// sysBusy is the machine's busy CPU time (all CPUs, everything but idle and iowait).
func sysBusy() time.Duration {
	bs, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line := strings.SplitN(string(bs), "\n", 2)[0]
	f := strings.Fields(line)[1:]
	var busy int64
	for i, x := range f {
		v, _ := strconv.ParseInt(x, 10, 64)
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		busy += v
	}
	return time.Duration(busy) * (time.Second / 100)
}

func median(xs []float64) float64 {
	s := append([]float64{}, xs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func report(res map[string][]result, rounds int, dur time.Duration, conns int, outPath string) error {
	out := map[string]any{"rounds": rounds, "duration_s": dur.Seconds(), "connections": conns, "cpus": runtime.NumCPU(), "backends": 2}
	agg := func(key string, f func(result) float64) float64 {
		var xs []float64
		for _, r := range res[key] {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	perReq := func(key string, f func(result) time.Duration) float64 {
		var xs []float64
		for _, r := range res[key] {
			xs = append(xs, float64(f(r).Nanoseconds())/float64(r.requests))
		}
		return median(xs)
	}
	fmt.Printf("\nmedians over %d rounds\n%-8s %12s %9s %12s %9s %14s %14s %14s\n", rounds, "path", "keepalive/s", "p99 ms", "newconn/s", "p99 ms", "lb CPU ns/req", "lb ns/newconn", "sys CPU us/req")
	for _, m := range modes {
		rps := agg(m+"/keepalive", func(r result) float64 { return r.rps })
		cps := agg(m+"/newconn", func(r result) float64 { return r.rps })
		p99 := agg(m+"/keepalive", func(r result) float64 { return r.p99ms })
		p99c := agg(m+"/newconn", func(r result) float64 { return r.p99ms })
		sysk := perReq(m+"/keepalive", func(r result) time.Duration { return r.sysCPU })
		out[m+"_rps"], out[m+"_cps"] = round(rps), round(cps)
		out[m+"_p99_ms"], out[m+"_cps_p99_ms"] = round2(p99), round2(p99c)
		out[m+"_sys_cpu_us_per_req"] = round2(sysk / 1000)
		lbk, lbc := "n/a", "n/a"
		if len(res[m+"/keepalive"]) > 0 && res[m+"/keepalive"][0].lbKnown {
			k := perReq(m+"/keepalive", func(r result) time.Duration { return r.lbCPU })
			c := perReq(m+"/newconn", func(r result) time.Duration { return r.lbCPU })
			out[m+"_lb_cpu_ns_per_req"], out[m+"_lb_cpu_ns_per_conn"] = round(k), round(c)
			lbk, lbc = fmt.Sprintf("%.0f", k), fmt.Sprintf("%.0f", c)
		} else if m == "direct" {
			lbk, lbc = "0", "0"
		}
		fmt.Printf("%-8s %12.0f %9.2f %12.0f %9.2f %14s %14s %14.1f\n", m, rps, p99, cps, p99c, lbk, lbc, sysk/1000)
	}
	ratio := func(a, b string) float64 {
		x, _ := out[a].(float64)
		y, _ := out[b].(float64)
		if y == 0 {
			return 0
		}
		return round2(x / y)
	}
	out["xdp_vs_direct"] = ratio("xdp_rps", "direct_rps")
	out["xdp_cps_vs_direct"] = ratio("xdp_cps", "direct_cps")
	out["xdp_vs_haproxy"] = ratio("xdp_rps", "haproxy_rps")
	out["xdp_cps_vs_haproxy"] = ratio("xdp_cps", "haproxy_cps")
	out["xdp_vs_nft"] = ratio("xdp_rps", "nft_rps")
	out["xdp_cps_vs_nft"] = ratio("xdp_cps", "nft_cps")
	if h, ok := out["haproxy_lb_cpu_ns_per_req"].(float64); ok {
		if x, ok := out["xdp_lb_cpu_ns_per_req"].(float64); ok && x > 0 {
			out["haproxy_vs_xdp_lb_cpu"] = round2(h / x)
		}
	}
	fmt.Printf("\nratios: xdp/direct %.2fx (keep-alive) %.2fx (new connections); xdp/haproxy %.2fx, %.2fx; xdp/nft %.2fx, %.2fx\n",
		out["xdp_vs_direct"], out["xdp_cps_vs_direct"], out["xdp_vs_haproxy"], out["xdp_cps_vs_haproxy"], out["xdp_vs_nft"], out["xdp_cps_vs_nft"])
	fmt.Println("targets: xdp >= 0.95x direct; xdp >= 2x haproxy for new connections per second")
	if err := os.MkdirAll(filepath.Dir(outPath), 0o755); err != nil {
		return err
	}
	bs, _ := json.MarshalIndent(out, "", "  ")
	if err := os.WriteFile(outPath, append(bs, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", outPath)
	return nil
}

func round(x float64) float64  { return float64(int64(x + 0.5)) }
func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
