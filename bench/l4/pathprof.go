package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// pathStages are the packet path's functions whose inclusive time (every sample with the
// function on its call chain) the profile gives per request, in the order a request meets them:
// the whole packet softirq, the veth receive with its XDP programs and copies, the programs, the
// bridge and the routing of the router (and of the routed path's balancer host), and the
// endpoints' TCP.
var pathStages = []struct{ label, sym string }{
	{"packet softirq (net_rx_action)", "net_rx_action"},
	{"veth transmit (veth_xmit)", "veth_xmit"},
	{"veth NAPI receive (veth_poll)", "veth_poll"},
	{"skb to XDP buffer copy (skb_pp_cow_data)", "skb_pp_cow_data"},
	{"forwarder (xdp_lb)", "_xdp_lb"},
	{"backend decap (xdp_decap)", "_xdp_decap"},
	{"router port pass (xdp_pass)", "_xdp_pass"},
	{"bridge ingress (br_handle_frame)", "br_handle_frame"},
	{"IP forwarding (ip_forward)", "ip_forward"},
	{"route lookup (fib_table_lookup)", "fib_table_lookup"},
	{"TCP receive (tcp_v4_rcv)", "tcp_v4_rcv"},
	{"idle (do_idle)", "do_idle"},
}

var (
	reEvents   = regexp.MustCompile(`Event count \(approx\.\): (\d+)`)
	reChildren = regexp.MustCompile(`^\s*([\d.]+)%\s+([\d.]+)%\s+\[[k.]\]\s+(\S+)`)
)

// pathProfile reads a cpu-clock recording with call chains and gives each stage of pathStages
// as microseconds per request (the sampled CPU time whose call chain holds the stage's function,
// over the run's requests). The machine is shared: other processes' packets that take the same
// functions count too, so the stages are upper bounds, sharper for the lab's own veth and bridge
// functions than for net_rx_action and tcp_v4_rcv.
func pathProfile(data string, requests int64) (string, error) {
	rep, err := exec.Command("perf", "report", "-i", data, "--children", "--sort", "sym", "--stdio", "-g", "none", "--percent-limit", "0").Output()
	if err != nil {
		return "", fmt.Errorf("perf report --children: %w", err)
	}
	m := reEvents.FindSubmatch(rep)
	if m == nil {
		return "", fmt.Errorf("perf report --children: no event count in the report of %s", data)
	}
	totalNs, _ := strconv.ParseFloat(string(m[1]), 64)
	children := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(rep))
	for sc.Scan() {
		if f := reChildren.FindStringSubmatch(sc.Text()); f != nil {
			v, _ := strconv.ParseFloat(f[1], 64)
			children[f[3]] += v
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# inclusive CPU per request (us), %d requests, %.2f s sampled\n", requests, totalNs/1e9)
	for _, s := range pathStages {
		var pct float64
		for sym, v := range children {
			// BPF programs are bpf_prog_<tag>_<name>; kernel functions match exactly.
			if sym == s.sym || (strings.HasPrefix(s.sym, "_") && strings.HasPrefix(sym, "bpf_prog_") && strings.HasSuffix(sym, s.sym)) {
				pct += v
			}
		}
		fmt.Fprintf(&b, "%-44s %8.2f\n", s.label, pct/100*totalNs/float64(requests)/1000)
	}
	return b.String(), nil
}
