package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/switchyard/switchyard/lab/experiment/l4/l4exp"
)

func init() {
	Register(Experiment{
		Name:      "l4-flood",
		Stop:      "l4",
		Summary:   "a random-source SYN flood on the XDP VIP with the guard off and on: established connections lost, new connections served, backends' SYN_RECV, CPU per flood packet",
		NeedsRoot: true,
		Run:       runL4Flood,
	})
}

// floodGuards are the runs of l4-flood: the guard off (the defaults), a per-source limit on the
// web VIP, and the same with a deny rule for the flood's range (the drop path).
func floodGuards() []l4exp.FloodGuard {
	limit := []string{"limit", "--vip", "web", "--source-rate", "50", "--source-burst", "50", "--prefix-v4", "24"}
	return []l4exp.FloodGuard{
		{Name: "off"},
		{Name: "per-source", Commands: [][]string{limit}},
		{Name: "deny", Commands: [][]string{limit, {"add", "deny", l4exp.FloodSources.String(), "--vip", "web"}}},
	}
}

func runL4Flood(ctx context.Context, w io.Writer, opt Options) error {
	o := l4exp.FloodOptions{Conns: 1000, NewRate: 50, NewTimeout: 3 * time.Second, Duration: 5 * time.Second,
		Max: 5_000_000, Senders: 2, Workers: 100, Guards: floodGuards()}
	if opt.Quick {
		o.Conns, o.Duration, o.Max = 200, time.Second, 1_000_000
	}
	fmt.Fprintln(w, "l4-flood: a random-source SYN flood on the web VIP (198.18.100.1:80) through switchyard's daemon")
	fmt.Fprintln(w, "setup, per run a lab of its own: 3 clients, 1 balancer (`lb run`, XDP), 3 backends (app server,")
	fmt.Fprintf(w, "the kernel's SYN cookies). c3 floods from two goroutines on raw sockets (random sources in %s,\n", l4exp.FloodSources)
	fmt.Fprintf(w, "random ports, %s, at most %d packets) while c1 holds %d keep-alive connections (a request on each\n", o.Duration, o.Max, o.Conns)
	fmt.Fprintf(w, "before, during (spread over the flood) and after) and c2 opens %d new connections a second (a GET,\n", o.NewRate)
	fmt.Fprintf(w, "%s timeout). Guard per run, through `switchyard guard` on the daemon's socket:\n", o.NewTimeout)
	for _, g := range o.Guards {
		var cmds []string
		for _, c := range g.Commands {
			cmds = append(cmds, "switchyard guard "+strings.Join(c, " "))
		}
		if len(cmds) == 0 {
			cmds = []string{"(none: the defaults)"}
		}
		fmt.Fprintf(w, "  %-10s %s\n", g.Name, strings.Join(cmds, "; "))
	}
	if opt.Quick {
		fmt.Fprintf(w, "QUICK run: %d established connections, a %s flood of at most %d packets.\n", o.Conns, o.Duration, o.Max)
	}
	start := time.Now()
	runs, err := l4exp.Flood(ctx, o)
	if err != nil {
		return fmt.Errorf("l4-flood: %w", err)
	}
	printFlood(w, runs)
	fmt.Fprintf(w, "took %s\n", time.Since(start).Round(time.Millisecond))
	if opt.JSON {
		return json.NewEncoder(w).Encode(map[string]any{"experiment": "l4-flood", "quick": opt.Quick, "runs": runs})
	}
	return nil
}

func printFlood(w io.Writer, runs []l4exp.FloodRun) {
	fmt.Fprintf(w, "\n%-10s %9s %9s %-16s %-14s %-17s %-18s %s\n", "guard", "flood", "pkt/s", "established lost", "new served", "SYN_RECV max", "CPU/flood pkt", "XDP verdicts")
	fmt.Fprintf(w, "%-10s %9s %9s %-16s %-14s %-17s %-18s %s\n", "target", "", "", "0", ">= 99%", "bounded", "reported", "")
	for _, r := range runs {
		lost := r.Before.Broke + r.During.Broke + r.After.Broke
		var bes []string
		for _, n := range sortedKeys(r.SynRecv) {
			bes = append(bes, fmt.Sprint(r.SynRecv[n]))
		}
		si, busy := r.PerPacket()
		fmt.Fprintf(w, "%-10s %9d %9.0f %-16s %-14s %-17s %-18s tx %d pass %d drop %d\n", r.Guard.Name, r.Flood.Sent, r.Flood.PPS(),
			fmt.Sprintf("%d of %d", lost, r.Conns), fmt.Sprintf("%d/%d %.1f%%", r.NewStarted-r.NewFailed, r.NewStarted, pctOf(r.NewStarted-r.NewFailed, r.NewStarted)),
			strings.Join(bes, "/"), fmt.Sprintf("%s / %s", nsStr(si), nsStr(busy)), r.XDP["tx"], r.XDP["pass"], r.XDP["drop"])
	}
	fmt.Fprintln(w, "\nper run: drops by reason and guard events (daemon's counters), backends' TCP counters (summed), SYN_RECV samples")
	for _, r := range runs {
		fmt.Fprintf(w, "%-10s guard %s; xdp %s\n", r.Guard.Name, kv(r.GuardCounters), kv(pick(r.XDP, "conntrack_miss_syn", "conntrack_insert_skipped", "conntrack_hit", "drop_no_backend")))
		fmt.Fprintf(w, "%-10s backends %s; %d SYN_RECV samples; established per round broken %d/%d/%d (before/during/after, during took %s); slowest new %s; %d sends refused\n",
			"", kv(r.TCPExt), r.SynRecvSamples, r.Before.Broke, r.During.Broke, r.After.Broke, r.During.Took.Round(time.Millisecond), r.NewSlowest.Round(time.Millisecond), r.Flood.Refused)
	}
	if len(runs) > 0 {
		fmt.Fprintf(w, "backends' kernel (be1): %s\n", kv(runs[0].Sysctls))
	}
	fmt.Fprint(w, `
reading:
- CPU per flood packet is the whole machine's (/proc/stat, every CPU, other work included) across
  the flood divided by the packets sent: softirq / all busy time. It covers the sender's syscall,
  the router's bridge and forwarding, the balancer's XDP program and, for each packet passed on,
  the IPIP hop, the backend's decapsulation and its SYN-ACK.
- established connections are protected by the unconfirmed tables: a SYN's entry is made in
  conntrack_syn4, not in the connection table, so random-source SYNs evict only each other
  (conntrack_insert_skipped: syn_insert_limit) and no established flow (docs/xdp.md, "The guard").
- what a random-source flood still costs with the guard off: every SYN is hashed, encapsulated
  and reaches a backend, which answers it with a SYN-ACK; SYN_RECV is bounded by the listener's
  backlog (somaxconn; Go listens with it), beyond which the kernel answers with SYN cookies
  (SyncookiesSent) and keeps no state. A per-source limit drops what exceeds each source prefix's
  bucket: a flood spread over many prefixes (here 256 /24s) keeps most of its rate; a deny rule on
  the range drops it all in XDP, at the cost of a parse, the VIP lookup and one LPM lookup.
`)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// kv prints a map as k=v in key order ("-" when empty).
func kv[V any](m map[string]V) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%v", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func pick(m map[string]uint64, names ...string) map[string]uint64 {
	out := map[string]uint64{}
	for _, n := range names {
		if v, ok := m[n]; ok {
			out[n] = v
		}
	}
	return out
}

func pctOf(a, b int) float64 { return 100 * float64(a) / float64(max(b, 1)) }

func nsStr(d time.Duration) string {
	if d < 10*time.Microsecond {
		return fmt.Sprintf("%dns", d.Nanoseconds())
	}
	return d.Round(100 * time.Nanosecond).String()
}
