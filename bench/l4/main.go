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
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/internal/procstat"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/fwd"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/loader"
)

var (
	modes   = []string{"direct", "xdp", "floor", "nft", "haproxy"}
	xdpMode = "native"
	perfDir string
	// smoke marks the result as a short run ("smoke": true in the JSON).
	smoke bool
	// hapPid is the running HAProxy's pid, and statsPrev the machine's BPF statistics setting
	// while the bench has them on: for the signal handler's clean-up.
	hapPid    atomic.Int64
	statsPrev atomic.Pointer[[]byte]
)

const bpfStatsKnob = "/proc/sys/kernel/bpf_stats_enabled"

// result is one wrk run.
type result struct {
	rps, p99ms float64
	requests   int64
	// lbCPU is the balancer's CPU time (XDP program run time, HAProxy process time); cpu is
	// every CPU's time on the machine during the run, by kind.
	lbCPU   time.Duration
	cpu     procstat.CPU
	lbKnown bool
	// other is the share of the machine's CPU that went to other processes during the run:
	// another engineer's build or benchmark would skew the run.
	other float64
	// othersCPU is that CPU time: the machine's busy time less it is the lab's own (its
	// processes, and the packet softirq that runs in their context or in ksoftirqd).
	othersCPU time.Duration
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
	pass    link.Link // xdp_pass on the balancer's router port, during the XDP runs
	// floor is xdp_macswap on the balancer's interface during the floor runs.
	floor link.Link
	hap   *exec.Cmd
	// bpfStats is on while the kernel's BPF run-time statistics are enabled.
	bpfStats bool
	// repeats is how many disturbed runs may still be repeated (it bounds the benchmark's time).
	repeats int
}

func main() {
	rounds := flag.Int("rounds", 6, "rounds per mode and load (alternating)")
	dur := flag.Duration("duration", 3*time.Second, "wrk duration of one run")
	conns := flag.Int("connections", 50, "wrk connections")
	out := flag.String("out", "bench/out/l4.json", "flat JSON result file")
	only := flag.String("modes", strings.Join(modes, ","), "comma-separated subset of direct,xdp,floor,nft,haproxy,routed,xdpgen (floor: the XDP path's hops with a MAC-swap XDP_TX program, no balancer work; routed: the balancer host as a plain router, the XDP path's hops without a balancer; xdpgen: the forwarder in generic mode)")
	flag.StringVar(&xdpMode, "xdp-mode", "native", "attach mode of the forwarder: native or generic")
	flag.BoolVar(&smoke, "smoke", false, "mark the JSON as a smoke run (BENCH_SMOKE=1: one short round)")
	flag.StringVar(&perfDir, "perf", "", "after the rounds, profile one more run per mode and load with perf record -a -g (not counted) into this `directory`")
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
	// Interrupted (Ctrl-C, a closed pipe on stdout, a timeout's SIGTERM): remove the lab and
	// HAProxy before going, as the deferred clean-up would not run.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		s := <-sig
		if pid := hapPid.Load(); pid > 0 {
			syscall.Kill(int(pid), syscall.SIGKILL)
		}
		if prev := statsPrev.Load(); prev != nil {
			os.WriteFile(bpfStatsKnob, *prev, 0o644)
		}
		lab.Destroy(l.Topo.Prefix)
		fmt.Fprintf(os.Stderr, "l4 bench: %s: lab %s removed\n", s, l.Topo.Prefix)
		os.Exit(1)
	}()
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
	b := &bench{l: l, c1: l.Client(1), lb: l.Balancer(), bes: l.Topo.ByRole(topo.Backend), work: work, dur: dur, conns: conns, threads: 2, repeats: rounds}
	if err := b.tuneLab(); err != nil {
		return err
	}
	res, err := b.allRounds(rounds)
	if err != nil {
		return err
	}
	if err := report(res, rounds, dur, conns, outPath); err != nil {
		return err
	}
	if perfDir != "" {
		return b.profile(perfDir)
	}
	return nil
}

// tuneLab readies the lab's namespaces for the bench: the VIP on the balancer for HAProxy, no
// xdp_pass on the router port, forwarding and the port and TIME_WAIT settings the
// new-connection runs need. It is apart from run because every setting is the same for every
// path, so none of them favours one balancer.
func (b *bench) tuneLab() error {
	// HAProxy binds the VIP: it must be a local address of the balancer for that mode (the XDP
	// forwarder and the DNAT rules act before the local delivery, so it does no harm there).
	if err := topo.AddLoopback(b.lb.NS, lab.WebVIP4); err != nil {
		return err
	}
	// The lab keeps xdp_pass on the balancer's router port for the forwarder's XDP_TX frames. A
	// veth with an XDP program turns every skb it receives into an XDP buffer, with a copy for
	// TCP's skbs: the nft and HAProxy balancers, whose every packet leaves through that port,
	// would pay it for a program they do not need. The bench attaches it for the XDP runs only.
	if err := loader.Detach(lab.PinDir(b.l.Topo.RouterNS, b.lb.Port)); err != nil {
		return err
	}
	if err := topo.Sysctl(b.lb.NS, "net.ipv4.ip_forward", "1"); err != nil {
		return err
	}
	// The routed path forwards the VIP back out of the interface it came in on: no ICMP
	// redirects (the clients are not on the balancer's segment, so none is due anyway).
	for _, k := range []string{"net.ipv4.conf.all.send_redirects", "net.ipv4.conf." + b.lb.Iface + ".send_redirects"} {
		if err := topo.Sysctl(b.lb.NS, k, "0"); err != nil {
			return err
		}
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
	return nil
}

// allRounds runs every mode under both loads for the given rounds, then the forwarder once more
// with BPF statistics on, and returns the results keyed "mode/load" (and "xdp/load/lbcpu"). It
// is apart from run because it is the measuring, while run builds and removes the lab.
func (b *bench) allRounds(rounds int) (map[string][]result, error) {
	res := map[string][]result{}
	fmt.Printf("L4 benchmark: %d rounds x %d modes x 2 loads, wrk -t%d -c%d -d%s, 2 backends, %d CPUs\n",
		rounds, len(modes), b.threads, b.conns, b.dur, runtime.NumCPU())
	for r := 0; r < rounds; r++ {
		// Every mode's keep-alive run, then every mode's new-connection run: the runs that the
		// ratios compare follow each other closely, while the machine drifts.
		for _, load := range []string{"keepalive", "newconn"} {
			for _, m := range order(modes, r) {
				x, err := b.run(m, load)
				if err != nil {
					return nil, fmt.Errorf("round %d: %w", r+1, err)
				}
				fmt.Printf("round %d %-8s %-9s %9.0f req/s  p99 %6.2f ms  %s\n", r+1, m, load, x.rps, x.p99ms, x.cpuLine())
				res[m+"/"+load] = append(res[m+"/"+load], x)
			}
		}
	}
	// The XDP program's own run time comes from BPF run-time statistics, which put two clock
	// reads around every program run (the forwarder's, and the decap and pass programs' of
	// every path). They stay off during the rounds, so that no path pays for the measurement,
	// and one more run per load measures the forwarder with them on.
	if contains(modes, "xdp") {
		if err := b.withBPFStats(func() error {
			for _, load := range []string{"keepalive", "newconn"} {
				x, err := b.run("xdp", load)
				if err != nil {
					return fmt.Errorf("xdp program CPU run: %w", err)
				}
				fmt.Printf("xdp program CPU (bpf stats on) %-9s %9.0f req/s  %.0f ns/req\n", load, x.rps, float64(x.lbCPU.Nanoseconds())/float64(x.requests))
				res["xdp/"+load+"/lbcpu"] = append(res["xdp/"+load+"/lbcpu"], x)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// run sets a mode up, measures one load through it and tears it down. When other processes took
// more than maxOther of the machine during the run, it runs once more (while the repeat budget
// lasts) and keeps the run that was disturbed less.
func (b *bench) run(mode, load string) (result, error) {
	var best result
	for try := 0; try < 2; try++ {
		if err := b.setup(mode); err != nil {
			b.teardown(mode)
			return result{}, fmt.Errorf("set up %s: %w", mode, err)
		}
		var x result
		err := b.probe()
		if err == nil {
			x, err = b.measure(mode, load == "newconn")
		}
		b.teardown(mode)
		if err != nil {
			return result{}, fmt.Errorf("%s %s: %w", mode, load, err)
		}
		if try == 0 || x.other < best.other {
			best = x
		}
		if x.other <= maxOther || b.repeats <= 0 {
			break
		}
		b.repeats--
		fmt.Printf("        %-8s %-9s %9.0f req/s  other processes took %.0f%% of the CPU\n", mode, load, x.rps, 100*x.other)
	}
	return best, nil
}

// probe checks, before a run, that the VIP answers 200 from the client namespace through the
// path just set up (up to 5 s): a path that does not carry traffic fails the bench, it is not
// measured.
func (b *bench) probe() error {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: namednetns.Dialer(b.c1.NS, &net.Dialer{Timeout: time.Second}), DisableKeepAlives: true}}
	var last string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := c.Get("http://" + lab.WebVIP4.String() + "/")
		if err != nil {
			last = err.Error()
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		last = resp.Status
	}
	return fmt.Errorf("the VIP did not answer 200 within 5s (last: %s)", last)
}

// maxOther is the share of the machine's CPU that other processes may take during a run before
// the run is repeated.
const maxOther = 0.05

// withBPFStats runs fn with the kernel's BPF run-time statistics on, and restores the machine's
// setting after.
func (b *bench) withBPFStats(fn func() error) error {
	prev, err := os.ReadFile(bpfStatsKnob)
	if err != nil {
		return fmt.Errorf("read bpf stats setting: %w", err)
	}
	statsPrev.Store(&prev)
	defer func() {
		b.bpfStats = false
		os.WriteFile(bpfStatsKnob, prev, 0o644)
		statsPrev.Store(nil)
	}()
	if err := os.WriteFile(bpfStatsKnob, []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enable bpf stats: %w", err)
	}
	b.bpfStats = true
	return fn()
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// order is the modes' order in round r: rotated by one each round and reversed every other
// round, so that no mode always runs first, last or right after the same neighbour (a mode's
// leftovers, TIME_WAIT sockets or a warm cache, would always help or hurt the same peer).
func order(ms []string, r int) []string {
	k := r % len(ms)
	o := append(append([]string{}, ms[k:]...), ms[:k]...)
	if r%2 == 1 {
		for i, j := 0, len(o)-1; i < j; i, j = i+1, j-1 {
			o[i], o[j] = o[j], o[i]
		}
	}
	return o
}

// cpuLine is the machine's CPU per request of a run, by kind, in microseconds.
func (r result) cpuLine() string {
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(r.requests) / 1000 }
	return fmt.Sprintf("CPU us/req: user %.1f kernel %.1f softirq %.1f total %.1f lab %.1f  other %2.0f%%",
		per(r.cpu.User), per(r.cpu.Kernel), per(r.cpu.Softirq), per(r.cpu.Busy), per(r.labCPU()), 100*r.other)
}

// profile runs each mode and load once more under a system-wide `perf record -a -g` and writes
// the flat profile by symbol beside the recording: where the CPU of a path goes.
func (b *bench) profile(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, m := range modes {
		for _, load := range []string{"keepalive", "newconn"} {
			if err := b.setup(m); err != nil {
				b.teardown(m)
				return fmt.Errorf("set up %s: %w", m, err)
			}
			data := filepath.Join(dir, m+"-"+load+".data")
			rec := exec.Command("perf", "record", "-a", "-g", "-q", "-o", data, "--", "sleep", strconv.Itoa(int(b.dur.Seconds())))
			if err := rec.Start(); err != nil {
				b.teardown(m)
				return fmt.Errorf("start perf: %w", err)
			}
			x, err := b.measure(m, load == "newconn")
			rerr := rec.Wait()
			b.teardown(m)
			if err != nil {
				return fmt.Errorf("profile %s %s: %w", m, load, err)
			}
			if rerr != nil {
				return fmt.Errorf("perf record: %w", rerr)
			}
			rep, err := exec.Command("perf", "report", "-i", data, "--no-children", "--sort", "sym", "--stdio", "-g", "none", "--percent-limit", "0.3").Output()
			if err != nil {
				return fmt.Errorf("perf report: %w", err)
			}
			stages, err := pathProfile(data, x.requests)
			if err != nil {
				return err
			}
			txt := filepath.Join(dir, m+"-"+load+".txt")
			head := fmt.Sprintf("# %s %s: %.0f req/s, %d requests, %s\n%s", m, load, x.rps, x.requests, x.cpuLine(), stages)
			if err := os.WriteFile(txt, append([]byte(head), rep...), 0o644); err != nil {
				return err
			}
			fmt.Printf("profile %-8s %-9s %9.0f req/s  %s -> %s\n", m, load, x.rps, x.cpuLine(), txt)
		}
	}
	return nil
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
	case "routed":
		return b.setupRouted()
	case "floor":
		return b.setupFloor()
	case "xdp", "xdpgen":
		return b.setupXDP(mode)
	case "nft":
		return b.setupNft()
	case "haproxy":
		return b.setupHAProxy()
	}
	return fmt.Errorf("unknown mode %s", mode)
}

// setupXDP routes the VIP to the balancer and starts switchyard's XDP forwarder there, native
// or (xdpgen) generic, with xdp_pass on the router port in native mode. Each balancer's setup
// is a function of its own so that setup reads as the list of paths compared.
func (b *bench) setupXDP(mode string) error {
	rt := b.l.Topo.RouterNS
	vipNet := netip.PrefixFrom(lab.WebVIP4, 32)
	if err := topo.SetRoute(rt, vipNet, []netip.Addr{b.lb.Addr4}); err != nil {
		return err
	}
	am := loader.Mode(xdpMode)
	if mode == "xdpgen" {
		am = loader.Generic
	}
	// In native mode the router port must run an XDP program to accept the forwarder's
	// XDP_TX frames. In generic mode XDP_TX sends an skb, which the port takes as any
	// other: a program there would only copy it into an XDP buffer.
	if am == loader.Native {
		pass, err := namednetns.In(rt, func() (link.Link, error) { return loader.AttachPass(b.lb.Port, loader.Native, "") })
		if err != nil {
			return fmt.Errorf("xdp_pass on router port %s: %w", b.lb.Port, err)
		}
		b.pass = pass
	}
	seg := b.l.Topo.Segment(b.lb.Segment)
	mac, _ := net.ParseMAC(seg.RouterMAC)
	f, err := fwd.Start(fwd.Options{NS: b.lb.NS, Iface: b.lb.Iface, NextHopMAC: mac, Mode: am, Src4: lab.Encap4, Src6: lab.Encap6})
	if err != nil {
		return err
	}
	b.fw = f
	v := b.l.VIP("web")
	return f.SetVIP(v.Key, v.ID, 0, []fwd.Backend{{Addr: b.bes[0].Addr4, Weight: 1}, {Addr: b.bes[1].Addr4, Weight: 1}})
}

// setupNft routes the VIP to the balancer and loads an nftables DNAT balancer there.
func (b *bench) setupNft() error {
	rt := b.l.Topo.RouterNS
	vipNet := netip.PrefixFrom(lab.WebVIP4, 32)
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
}

// setupHAProxy routes the VIP to the balancer and starts HAProxy in TCP mode there, returning
// once it accepts connections on the VIP (or its log when it does not within 5s).
func (b *bench) setupHAProxy() error {
	rt := b.l.Topo.RouterNS
	vipNet := netip.PrefixFrom(lab.WebVIP4, 32)
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
	cmd := exec.Command("nsenter", "--net="+namednetns.Path(b.lb.NS), "--", "haproxy", "-db", "-f", p)
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
	hapPid.Store(int64(cmd.Process.Pid))
	// Wait until it listens.
	for i := 0; i < 50; i++ {
		if c, err := namednetns.Dialer(b.lb.NS, &net.Dialer{Timeout: time.Second})(context.Background(), "tcp", lab.WebVIP4.String()+":80"); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(b.work, "haproxy.log"))
	return fmt.Errorf("haproxy did not listen within 5s: %s", log)
}

func (b *bench) teardown(mode string) {
	switch mode {
	case "routed":
		b.teardownRouted()
	case "floor":
		b.teardownFloor()
	case "xdp", "xdpgen":
		if b.fw != nil {
			b.fw.Close() // unpinned: closing detaches
			b.fw = nil
		}
		if b.pass != nil {
			b.pass.Close()
			b.pass = nil
		}
	case "nft":
		nsexec(b.lb.NS, "nft", "delete", "table", "ip", "sybench")
		// The NAT balancer's connection tracking must stay in its namespace: a router that
		// tracked connections too would tax every path that crosses it.
		if n := conntrackCount(b.l.Topo.RouterNS); n > 0 {
			fmt.Printf("warning: the router namespace tracks %d connections after the nft run: every path pays for it\n", n)
		}
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
			hapPid.Store(0)
		}
	}
	time.Sleep(300 * time.Millisecond) // let TIME_WAIT and conntrack settle between runs
}

// conntrackCount is the number of tracked connections in a namespace (0 when the kernel has no
// conntrack).
func conntrackCount(ns string) int {
	var n int
	namednetns.DoNamed(ns, func() error {
		bs, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
		if err == nil {
			n, _ = strconv.Atoi(strings.TrimSpace(string(bs)))
		}
		return err
	})
	return n
}

func nsexec(ns string, argv ...string) error {
	out, err := exec.Command("nsenter", append([]string{"--net=" + namednetns.Path(ns), "--"}, argv...)...).CombinedOutput()
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
	reBad  = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
)

// measure runs wrk once from the client namespace and the CPU counters around it.
func (b *bench) measure(mode string, newConn bool) (result, error) {
	args := []string{"--net=" + namednetns.Path(b.c1.NS), "--", "wrk", "-t" + strconv.Itoa(b.threads), "-c" + strconv.Itoa(b.conns),
		"-d" + strconv.Itoa(int(b.dur.Seconds())) + "s", "--timeout", "5s", "--latency"}
	if newConn {
		args = append(args, "-H", "Connection: close")
	}
	args = append(args, "http://"+lab.WebVIP4.String()+"/")
	lb0, known := b.lbCPU()
	others0 := othersCPU()
	cpu0, t0 := readCPU(), time.Now()
	out, err := exec.Command("nsenter", args...).CombinedOutput()
	if err != nil {
		return result{}, fmt.Errorf("wrk: %w: %s", err, out)
	}
	lb1, _ := b.lbCPU()
	cpu1, wall := readCPU(), time.Since(t0)
	s := string(out)
	var r result
	r.cpu = cpu1.Sub(cpu0)
	r.othersCPU = othersSince(others0)
	r.other = float64(r.othersCPU) / float64(wall) / float64(runtime.NumCPU())
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
	// Failed requests would flatter a balancer: refuse the run instead (wrk prints these lines
	// only when the count is not zero).
	if m := reErr.FindStringSubmatch(s); m != nil {
		return r, fmt.Errorf("socket errors in %d requests (%s): %s", r.requests, m[0], s)
	}
	if m := reBad.FindStringSubmatch(s); m != nil {
		return r, fmt.Errorf("%s non-2xx answers in %d requests: %s", m[1], r.requests, s)
	}
	r.lbCPU, r.lbKnown = lb1-lb0, known
	return r, nil
}

// lbCPU is the balancer's own CPU time so far: the XDP program's run time (bpf stats) or the
// HAProxy process's user+system time. The nftables path runs in softirq and cannot be told
// apart from the rest of the kernel's packet work, so it has none (see sysCPU).
func (b *bench) lbCPU() (time.Duration, bool) {
	switch {
	case b.fw != nil && b.bpfStats:
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

// othersCPU reads the CPU time of every user-space process on the machine but this driver and
// its children (wrk, HAProxy, nft), with the time of their reaped children: what another
// engineer's build or benchmark uses. Kernel threads are left out: their share is the packet
// path's (ksoftirqd) or too small to matter.
func othersCPU() map[int]time.Duration {
	ents, _ := os.ReadDir("/proc")
	out := map[int]time.Duration{}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		f := procStat(pid)
		// f[1] is the parent, f[6] the flags (PF_KTHREAD), f[11..14] utime stime cutime cstime.
		if len(f) < 15 || f[1] == "2" || f[1] == strconv.Itoa(self) {
			continue
		}
		if fl, _ := strconv.ParseUint(f[6], 10, 64); fl&0x00200000 != 0 {
			continue
		}
		var t int64
		for _, x := range f[11:15] {
			v, _ := strconv.ParseInt(x, 10, 64)
			t += v
		}
		out[pid] = time.Duration(t) * (time.Second / 100)
	}
	return out
}

// othersSince is the CPU time other processes used since the snapshot before. A new process
// counts whole; a process that ended has its whole time added to its parent's reaped-children
// time, so its time before the snapshot is taken back out.
func othersSince(before map[int]time.Duration) time.Duration {
	after := othersCPU()
	var d time.Duration
	for pid, t := range after {
		d += t - before[pid]
	}
	for pid, t := range before {
		if _, ok := after[pid]; !ok {
			d -= t
		}
	}
	return max(d, 0)
}

// procStat is a process's /proc/PID/stat fields after the command name (state first).
func procStat(pid int) []string {
	bs, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(bs)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return nil
	}
	return strings.Fields(s[i+2:])
}

// procCPU reads a process's utime+stime.
func procCPU(pid int) time.Duration {
	f := procStat(pid)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * (time.Second / 100)
}

// labCPU is the run's machine busy time less other processes' time (never below zero).
func (r result) labCPU() time.Duration { return max(r.cpu.Busy-r.othersCPU, 0) }

// readCPU is the machine's CPU time now (zero when /proc/stat cannot be read: no figures).
func readCPU() procstat.CPU {
	c, _ := procstat.ReadCPU()
	return c
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

// stat is what the report says of one mode and load over the rounds.
type stat struct {
	rps, p99 float64
	// CPU per request in microseconds, medians: the machine's total busy time and its parts.
	total, user, kernel, softirq float64
	// lab is the machine's busy CPU less other processes' per request: what the path costs the
	// lab, less sensitive to a busy machine than requests/s.
	lab float64
}

func summarize(rs []result) stat {
	col := func(f func(result) float64) float64 {
		var xs []float64
		for _, r := range rs {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	per := func(f func(result) time.Duration) float64 {
		return col(func(r result) float64 { return float64(f(r).Nanoseconds()) / float64(r.requests) / 1000 })
	}
	return stat{
		rps: col(func(r result) float64 { return r.rps }), p99: col(func(r result) float64 { return r.p99ms }),
		total: per(func(r result) time.Duration { return r.cpu.Busy }), user: per(func(r result) time.Duration { return r.cpu.User }),
		lab:    per(func(r result) time.Duration { return r.labCPU() }),
		kernel: per(func(r result) time.Duration { return r.cpu.Kernel }), softirq: per(func(r result) time.Duration { return r.cpu.Softirq }),
	}
}

// paired is f(a's run, b's run) for each round, both modes having run in the same round: it
// cancels the drift of a shared machine from round to round. It returns the median, min, max.
func paired(res map[string][]result, a, b string, f func(x, y result) float64) (med, lo, hi float64, ok bool) {
	xa, xb := res[a], res[b]
	n := min(len(xa), len(xb))
	if n == 0 {
		return 0, 0, 0, false
	}
	var xs []float64
	for i := 0; i < n; i++ {
		xs = append(xs, f(xa[i], xb[i]))
	}
	sort.Float64s(xs)
	return median(xs), xs[0], xs[n-1], true
}

func report(res map[string][]result, rounds int, dur time.Duration, conns int, outPath string) error {
	out := map[string]any{"rounds": rounds, "duration_s": dur.Seconds(), "connections": conns, "cpus": runtime.NumCPU(), "backends": 2, "smoke": smoke}
	reportMedians(res, out, rounds)
	reportRatios(res, out)
	reportCapacity(res, out)
	fmt.Println("targets: xdp >= 0.98x direct (keep-alive), >= 0.95x direct (new connections); xdp's CPU per new connection <= 1/30 of haproxy's")
	if err := os.MkdirAll(filepath.Dir(outPath), 0o755); err != nil {
		return err
	}
	bs, _ := json.MarshalIndent(out, "", "  ")
	if err := writeAtomic(outPath, append(bs, '\n')); err != nil {
		return err
	}
	fmt.Println("wrote", outPath)
	return nil
}

// reportMedians prints each path's medians over the rounds and records them in out. The report
// is split by section (medians, ratios, capacity) so that each fits on a screen; every section
// writes its keys into the same JSON object.
func reportMedians(res map[string][]result, out map[string]any, rounds int) {
	fmt.Printf("\nmedians over %d rounds (CPU: the whole machine's busy time per request, all CPUs, in us)\n", rounds)
	fmt.Printf("%-8s %12s %7s %10s %7s %9s %8s %9s %8s %9s %8s %10s %10s\n", "path", "keepalive/s", "p99 ms", "newconn/s", "p99 ms",
		"CPU/req", "user", "kernel", "softirq", "CPU/conn", "softirq", "lb ns/req", "lb ns/conn")
	for _, m := range modes {
		k, c := summarize(res[m+"/keepalive"]), summarize(res[m+"/newconn"])
		out[m+"_rps"], out[m+"_cps"] = round(k.rps), round(c.rps)
		out[m+"_p99_ms"], out[m+"_cps_p99_ms"] = round2(k.p99), round2(c.p99)
		out[m+"_sys_cpu_us_per_req"], out[m+"_user_us_per_req"] = round2(k.total), round2(k.user)
		out[m+"_kernel_us_per_req"], out[m+"_softirq_us_per_req"] = round2(k.kernel), round2(k.softirq)
		out[m+"_sys_cpu_us_per_conn"], out[m+"_softirq_us_per_conn"] = round2(c.total), round2(c.softirq)
		out[m+"_lab_cpu_us_per_req"], out[m+"_lab_cpu_us_per_conn"] = round2(k.lab), round2(c.lab)
		lbk, lbc := "n/a", "n/a"
		lbKey := m + "/keepalive"
		if len(res[m+"/keepalive/lbcpu"]) > 0 {
			lbKey = m + "/keepalive/lbcpu"
		}
		if rs := res[lbKey]; len(rs) > 0 && rs[0].lbKnown {
			per := func(rs []result) float64 {
				var xs []float64
				for _, r := range rs {
					xs = append(xs, float64(r.lbCPU.Nanoseconds())/float64(r.requests))
				}
				return median(xs)
			}
			k := per(rs)
			c := per(res[strings.Replace(lbKey, "keepalive", "newconn", 1)])
			out[m+"_lb_cpu_ns_per_req"], out[m+"_lb_cpu_ns_per_conn"] = round(k), round(c)
			lbk, lbc = fmt.Sprintf("%.0f", k), fmt.Sprintf("%.0f", c)
		} else if m == "direct" {
			lbk, lbc = "0", "0"
		}
		fmt.Printf("%-8s %12.0f %7.2f %10.0f %7.2f %9.1f %8.1f %9.1f %8.1f %9.1f %8.1f %10s %10s\n", m, k.rps, k.p99, c.rps, c.p99,
			k.total, k.user, k.kernel, k.softirq, c.total, c.softirq, lbk, lbc)
	}
}

// reportRatios prints and records the throughput ratios between paths: of the medians, and
// paired within each round, which is the figure that holds on a busy machine.
func reportRatios(res map[string][]result, out map[string]any) {
	ratio := func(a, b string) float64 {
		x, _ := out[a].(float64)
		y, _ := out[b].(float64)
		if y == 0 {
			return 0
		}
		return round2(x / y)
	}
	fmt.Printf("\nratios (of the medians; in brackets the same ratio within each round: median, min..max)\n")
	for _, q := range []struct{ key, a, b, load string }{
		{"xdp_vs_direct", "xdp", "direct", "keepalive"}, {"xdp_cps_vs_direct", "xdp", "direct", "newconn"},
		{"xdp_vs_haproxy", "xdp", "haproxy", "keepalive"}, {"xdp_cps_vs_haproxy", "xdp", "haproxy", "newconn"},
		{"xdp_vs_nft", "xdp", "nft", "keepalive"}, {"xdp_cps_vs_nft", "xdp", "nft", "newconn"},
		{"direct_cps_vs_haproxy", "direct", "haproxy", "newconn"},
		{"routed_vs_direct", "routed", "direct", "keepalive"}, {"routed_cps_vs_direct", "routed", "direct", "newconn"},
		{"xdp_vs_routed", "xdp", "routed", "keepalive"}, {"xdp_cps_vs_routed", "xdp", "routed", "newconn"},
		{"floor_vs_direct", "floor", "direct", "keepalive"}, {"floor_cps_vs_direct", "floor", "direct", "newconn"},
		{"xdp_vs_floor", "xdp", "floor", "keepalive"}, {"xdp_cps_vs_floor", "xdp", "floor", "newconn"},
		{"xdpgen_vs_direct", "xdpgen", "direct", "keepalive"}, {"xdpgen_cps_vs_direct", "xdpgen", "direct", "newconn"},
	} {
		unit := "_rps"
		if q.load == "newconn" {
			unit = "_cps"
		}
		if !contains(modes, q.a) || !contains(modes, q.b) {
			continue
		}
		out[q.key] = ratio(q.a+unit, q.b+unit)
		med, lo, hi, ok := paired(res, q.a+"/"+q.load, q.b+"/"+q.load, func(x, y result) float64 { return x.rps / y.rps })
		if ok {
			out[q.key+"_paired"], out[q.key+"_min"], out[q.key+"_max"] = round2(med), round2(lo), round2(hi)
		}
		fmt.Printf("  %-22s %5.2fx  [%.2fx, %.2f..%.2f]\n", q.key, out[q.key], med, lo, hi)
	}
}

// reportCapacity prints and records the lab CPU each path costs per request and per new
// connection against direct's, and the balancer CPU of HAProxy against the XDP forwarder's.
func reportCapacity(res map[string][]result, out map[string]any) {
	if contains(modes, "xdp") && contains(modes, "direct") {
		perReq := func(r result) float64 { return float64(r.cpu.Busy.Nanoseconds()) / float64(r.requests) / 1000 }
		labPer := func(r result) float64 { return float64(r.labCPU().Nanoseconds()) / float64(r.requests) / 1000 }
		fmt.Printf("lab CPU per request (machine busy CPU less other processes', us; capacity = direct's / the path's, within each round)\n")
		for _, m := range modes {
			for _, load := range []string{"keepalive", "newconn"} {
				key := m + "_capacity_vs_direct"
				if load == "newconn" {
					key = m + "_cps_capacity_vs_direct"
				}
				med, lo, hi, ok := paired(res, "direct/"+load, m+"/"+load, func(x, y result) float64 { return labPer(x) / labPer(y) })
				if !ok || m == "direct" {
					continue
				}
				out[key] = round2(med)
				fmt.Printf("  %-28s %5.2fx  [%.2f..%.2f]  (%s: %.1f us, direct %.1f us)\n", key, med, lo, hi, m, summarize(res[m+"/"+load]).lab, summarize(res["direct/"+load]).lab)
			}
		}
		for _, q := range []struct{ key, load string }{{"xdp_extra_cpu_us_per_req", "keepalive"}, {"xdp_extra_cpu_us_per_conn", "newconn"}} {
			med, lo, hi, ok := paired(res, "xdp/"+q.load, "direct/"+q.load, func(x, y result) float64 { return perReq(x) - perReq(y) })
			if ok {
				out[q.key] = round2(med)
				fmt.Printf("  %-22s %+5.1f us  [%+.1f..%+.1f] (xdp minus direct, machine CPU, within each round)\n", q.key, med, lo, hi)
			}
		}
	}
	if h, ok := out["haproxy_lb_cpu_ns_per_req"].(float64); ok {
		if x, ok := out["xdp_lb_cpu_ns_per_req"].(float64); ok && x > 0 {
			out["haproxy_vs_xdp_lb_cpu"] = round2(h / x)
		}
	}
	if h, ok := out["haproxy_lb_cpu_ns_per_conn"].(float64); ok {
		if x, ok := out["xdp_lb_cpu_ns_per_conn"].(float64); ok && x > 0 {
			out["haproxy_vs_xdp_lb_cpu_conn"] = round2(h / x)
			fmt.Printf("  %-22s %5.1fx  (balancer CPU per new connection, haproxy / xdp)\n", "haproxy_vs_xdp_lb_cpu_conn", h/x)
		}
	}
}

// writeAtomic writes data to a temp file beside path and renames it over path, so that a reader
// never sees half a result.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write result: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("write result: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write result: %w", err)
	}
	return os.Rename(f.Name(), path)
}

func round(x float64) float64  { return float64(int64(x + 0.5)) }
func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
