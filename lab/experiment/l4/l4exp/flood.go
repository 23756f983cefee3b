package l4exp

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"time"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/internal/procstat"
	"github.com/switchyard/switchyard/lab"
	"github.com/switchyard/switchyard/lab/experiment/l4/l4load"
	"github.com/switchyard/switchyard/lab/topo"
	"github.com/switchyard/switchyard/maps"
)

// FloodSources is the flood's source range: inside the lab's benchmarking range 198.18.0.0/15
// but on no segment of it, so the backends' SYN-ACKs end at the router (no route) and never
// reach a host.
var FloodSources = netip.MustParsePrefix("198.19.0.0/16")

// FloodOptions size the l4-flood measurement.
type FloodOptions struct {
	// Conns established keep-alive connections (client c1), each asked once before, once
	// during (spread over the flood) and once after it.
	Conns int
	// NewRate legitimate new connections a second from c2 during the flood, each a GET that
	// must be answered within NewTimeout.
	NewRate    int
	NewTimeout time.Duration
	// Duration and Max bound each flood (from c3); Senders is its goroutines (1 or 2).
	Duration time.Duration
	Max      uint64
	Senders  int
	// Workers is how many requests of the established connections run at once.
	Workers int
	// Guards are the runs, each on a lab of its own (fresh backends: a SYN_RECV entry lives
	// about a minute).
	Guards []FloodGuard
	// Log, when set, gets a line per step.
	Log func(format string, args ...any)
}

// FloodGuard is one run's guard: `switchyard guard` command lines (without the socket flag),
// run against the lab's daemon once the established connections are open.
type FloodGuard struct {
	Name     string     `json:"name"`
	Commands [][]string `json:"commands"`
}

// FloodRun is one run's figures.
type FloodRun struct {
	Guard FloodGuard `json:"guard"`
	Flood SYNResult  `json:"flood"`
	// Established connections: a round of requests before, during and after the flood.
	Conns  int          `json:"conns"`
	Before l4load.Round `json:"before"`
	During l4load.Round `json:"during"`
	After  l4load.Round `json:"after"`
	// New connections started during the flood, failed (no 200 within the timeout), slowest.
	NewStarted int           `json:"new_started"`
	NewFailed  int           `json:"new_failed"`
	NewSlowest time.Duration `json:"new_slowest_ns"`
	// SynRecv is each backend's highest count of SYN_RECV sockets sampled during the flood.
	SynRecv        map[string]int `json:"syn_recv_max"`
	SynRecvSamples int            `json:"syn_recv_samples"`
	// Backends' kernel: the sysctls that bound SYN_RECV (be1's; every backend has the
	// defaults of a new namespace) and TcpExt counters summed over the backends, during the
	// flood.
	Sysctls map[string]string `json:"sysctls"`
	TCPExt  map[string]uint64 `json:"tcpext"`
	// CPU is the whole machine's CPU time from /proc/stat across the flood.
	CPU procstat.CPU `json:"cpu_ns"`
	// XDP and GuardCounters are the daemon's counters' packets during the flood (non-zero only).
	XDP           map[string]uint64 `json:"xdp"`
	GuardCounters map[string]uint64 `json:"guard_counters"`
}

// PerPacket is the machine's softirq and busy CPU time per flood packet sent.
func (r FloodRun) PerPacket() (softirq, busy time.Duration) {
	n := time.Duration(max(r.Flood.Sent, 1))
	return r.CPU.Softirq / n, r.CPU.Busy / n
}

// Flood runs the l4-flood measurement once per guard.
func Flood(ctx context.Context, o FloodOptions) ([]FloodRun, error) {
	bin, err := lab.Binary()
	if err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	var out []FloodRun
	for _, g := range o.Guards {
		r, err := floodRun(ctx, bin, g, o)
		if err != nil {
			return out, fmt.Errorf("guard %s: %w", g.Name, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func floodRun(ctx context.Context, bin string, g FloodGuard, o FloodOptions) (FloodRun, error) {
	r := FloodRun{Guard: g, Conns: o.Conns}
	spec := lab.Spec{Prefix: lab.TempPrefix("xf"), Clients: 3, Balancers: 1, Backends: 3}
	defer lab.Destroy(spec.Prefix)
	o.Log("%s: lab up (%s)", g.Name, spec.Prefix)
	st, err := lab.Up(lab.UpOptions{Spec: spec, Exe: bin, Balancer: lab.ModeDaemon})
	if err != nil {
		return r, err
	}
	l := st.Lab()
	lb := l.Balancer()
	sock := st.Sockets[lb.NS]
	bes := l.Topo.ByRole(topo.Backend)
	if err := waitBackends(lab.HTTPClient(l.Client(1), false, 2*time.Second), spec.Prefix, bes); err != nil {
		return r, err
	}
	vip := netip.AddrPortFrom(lab.WebVIP4, 80)
	o.Log("%s: %d established connections", g.Name, o.Conns)
	pool, err := l4load.OpenPool([]topo.Node{l.Client(1)}, vip.String(), o.Conns, o.Workers)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	r.Before = pool.Round("before", o.Workers)
	// The guard goes on once the connections are established, as an operator's would when the
	// attack starts (a limit on the clients' /24 would otherwise pace the pool's own dials).
	for _, c := range g.Commands {
		argv := append(append([]string{"guard"}, c...), "--socket", sock)
		if b, err := exec.CommandContext(ctx, bin, argv...).CombinedOutput(); err != nil {
			return r, fmt.Errorf("switchyard %v: %w: %s", argv, err, b)
		}
	}
	if r.Sysctls, err = synSysctls(bes[0].NS); err != nil {
		return r, err
	}
	stats0, err := daemonStats(ctx, sock)
	if err != nil {
		return r, err
	}
	ext0, err := tcpExt(bes)
	if err != nil {
		return r, err
	}
	gen := l4load.StartNewConns(l.Client(2), vip.String(), o.NewRate, o.NewRate*int(o.Duration/time.Second+2), o.NewTimeout)
	defer gen.Finish()
	sampler := startSynRecv(bes)
	during := make(chan l4load.Round, 1)
	go func() { during <- pool.RoundOver("during", o.Workers, o.Duration) }()
	cpu0, err := procstat.ReadCPU()
	if err != nil {
		return r, err
	}
	o.Log("%s: flood for %s (at most %d packets)", g.Name, o.Duration, o.Max)
	t0 := time.Now()
	r.Flood, err = SYNFlood(ctx, SYNOptions{NS: l.Client(3).NS, Sources: FloodSources, Dst: vip, Duration: o.Duration, Max: o.Max, Senders: o.Senders})
	cpu1, cerr := procstat.ReadCPU()
	t1 := time.Now()
	r.SynRecv, r.SynRecvSamples = sampler.finish()
	if err != nil {
		return r, err
	}
	if cerr != nil {
		return r, cerr
	}
	r.CPU = cpu1.Sub(cpu0)
	stats1, err := daemonStats(ctx, sock)
	if err != nil {
		return r, err
	}
	ext1, err := tcpExt(bes)
	if err != nil {
		return r, err
	}
	r.XDP, r.GuardCounters = counterDelta(stats0.Counters, stats1.Counters), counterDelta(stats0.Guard, stats1.Guard)
	r.TCPExt = map[string]uint64{}
	for k, v := range ext1 {
		r.TCPExt[k] = v - ext0[k]
	}
	gen.Finish()
	r.NewStarted, r.NewFailed, r.NewSlowest = gen.Count(t0, t1)
	r.During = <-during
	r.After = pool.Round("after", o.Workers)
	o.Log("%s: %d sent (%.0f/s), established %d/%d/%d broken, new %d of %d failed", g.Name, r.Flood.Sent, r.Flood.PPS(),
		r.Before.Broke, r.During.Broke, r.After.Broke, r.NewFailed, r.NewStarted)
	return r, nil
}

func daemonStats(ctx context.Context, sock string) (api.Stats, error) {
	var st api.Stats
	if err := api.NewClient(sock).Call(ctx, api.OpStats, api.Empty{}, &st); err != nil {
		return st, fmt.Errorf("read the balancer's counters: %w", err)
	}
	return st, nil
}

// counterDelta is b less a by name, in packets, without the names that did not move.
func counterDelta(a, b map[string]maps.Counter) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range b {
		if d := v.Packets - a[k].Packets; d != 0 {
			out[k] = d
		}
	}
	return out
}
