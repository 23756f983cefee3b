package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/switchyard/switchyard/lab/app"
	"github.com/switchyard/switchyard/lab/experiment/l4/l4exp"
)

func init() {
	Register(Experiment{
		Name:      "l4-skew",
		Stop:      "l4",
		Summary:   "Layer 4 Balancing: six persistent connections, even and uneven request mixes; connection skew vs request skew",
		NeedsRoot: true,
		Run:       runL4Skew,
	})
	Register(Experiment{
		Name:      "health-check",
		Stop:      "l4",
		Summary:   "Role of the Load Balancer: answered requests when a replica dies, with health checking on and off",
		NeedsRoot: true,
		Run:       runHealthCheck,
	})
}

// lessonSkew is the Layer 4 Balancing lesson's own table (seed 002), per mix.
var lessonSkew = map[string]struct {
	conns, reqs       [3]int
	paths             [3]string
	decisions         int
	perReq            string
	connSkew, reqSkew string
	bytes             int
}{
	"10,10,10,10,10,10": {[3]int{2, 2, 2}, [3]int{20, 20, 20}, [3]string{"event=10 tracking=10", "event=10 tracking=10", "event=10 tracking=10"}, 6, "0.100", "1.00", "1.00", 4710},
	"1,2,4,8,16,32":     {[3]int{2, 2, 2}, [3]int{9, 18, 36}, [3]string{"event=4 tracking=5", "event=9 tracking=9", "event=18 tracking=18"}, 6, "0.095", "1.00", "4.00", 4975},
}

func runL4Skew(ctx context.Context, w io.Writer, opt Options) error {
	eph := 5
	if opt.Quick {
		eph = 1
	}
	fmt.Fprintln(w, "l4-skew: the Layer 4 Balancing lesson (seed 002) on switchyard's XDP forwarder")
	fmt.Fprintln(w, "setup: 6 client namespaces, 1 balancer namespace (XDP, Maglev + connection table, IPIP DSR),")
	fmt.Fprintln(w, "3 backend namespaces (be1..be3 = the lesson's k1..k3) running the lab's app server; each client")
	fmt.Fprintln(w, "opens one persistent HTTP/1.1 connection and sends its share in sequence, paths alternating")
	fmt.Fprintln(w, "/tracking and /event; clients run one after the other.")
	if opt.Quick {
		fmt.Fprintf(w, "QUICK run: the ephemeral-port variant runs %d time per mix instead of 5.\n", eph)
	}
	start := time.Now()
	runs, err := l4exp.Skew(ctx, eph)
	if err != nil {
		return fmt.Errorf("l4-skew: %w", err)
	}
	for _, r := range runs {
		if r.Ports != "round-robin" {
			continue
		}
		mix := l4exp.MixString(r.Mix)
		ls := lessonSkew[mix]
		fmt.Fprintf(w, "\n%d clients, %d requests sent (shares: %s); source ports chosen so that Maglev's pick is the lesson's round robin\n", len(r.Mix), r.Requests, mix)
		fmt.Fprintf(w, "%-8s %11s %9s  %-24s | %-37s\n", "replica", "connections", "requests", "path distribution", "lesson: connections requests paths")
		for i, row := range r.Rows {
			fmt.Fprintf(w, "%-8s %11d %9d  %-24s | %19d %8d %s\n", row.Backend, row.Conns, row.Requests, app.SortedPaths(row.Paths), ls.conns[i], ls.reqs[i], ls.paths[i])
		}
		fmt.Fprintf(w, "decisions = %d (forwarder's SYN connection-table misses), decisions per request = %.3f | lesson: %d, %s\n",
			r.Decisions, float64(r.Decisions)/float64(r.Requests), ls.decisions, ls.perReq)
		fmt.Fprintf(w, "connection skew = %s, request skew = %s | lesson: %s, %s\n", l4exp.FormatSkew(r.ConnSkew), l4exp.FormatSkew(r.ReqSkew), ls.connSkew, ls.reqSkew)
		fmt.Fprintf(w, "bytes toward the VIP through the balancer = %d (IP packets incl. handshake, ACKs, FIN) | lesson: %d (request payload only)\n", r.VIPBytes, ls.bytes)
	}
	fmt.Fprintln(w, "\nthe same mixes with the kernel's ephemeral source ports (what Maglev does with only 6 connections):")
	fmt.Fprintf(w, "%-20s %-22s %-22s %s\n", "mix", "connections be1/2/3", "requests be1/2/3", "conn skew / req skew")
	for _, r := range runs {
		if r.Ports == "round-robin" {
			continue
		}
		var cs, rs []string
		for _, row := range r.Rows {
			cs, rs = append(cs, fmt.Sprint(row.Conns)), append(rs, fmt.Sprint(row.Requests))
		}
		fmt.Fprintf(w, "%-20s %-22s %-22s %s / %s\n", l4exp.MixString(r.Mix), strings.Join(cs, "/"), strings.Join(rs, "/"), l4exp.FormatSkew(r.ConnSkew), l4exp.FormatSkew(r.ReqSkew))
	}
	fmt.Fprint(w, `
differences from the lesson, and why:
- the lesson's balancer is a round-robin proxy; switchyard's picks by Maglev hash of the 5-tuple.
  To compare like with like, the experiment chooses each client's source port with the Go model
  of the forwarder's hash (maps.Slot) so that Maglev's pick equals round robin; the run checks
  that every connection landed where the model said, so the table is the lesson's, measured.
- decisions are real: the forwarder counts one connection-table miss per SYN (one decision per
  connection); every later packet of the connection follows the table, so the request skew of
  the uneven mix (4.00) is the same as the lesson's: an L4 balancer balances connections.
- bytes differ: the lesson counts request bytes its proxy relays; the forwarder counts every IP
  packet toward the VIP (headers, handshake, ACKs). Replies never cross it (DSR), so the
  lesson's point stands: it sees a byte stream of unknown content and no request at all.
- with ephemeral ports, 6 connections over 3 backends by hash are rarely 2/2/2: hashing balances
  large numbers of connections, not six; the connection skew itself varies run to run (an idle
  backend shows as "inf"), on top of the request skew the persistent connections add.
`)
	fmt.Fprintf(w, "took %s\n", time.Since(start).Round(time.Millisecond))
	if opt.JSON {
		return json.NewEncoder(w).Encode(map[string]any{"experiment": "l4-skew", "quick": opt.Quick, "runs": runs})
	}
	return nil
}

func runHealthCheck(ctx context.Context, w io.Writer, opt Options) error {
	o := l4exp.HealthOptions{Requests: 600, Gap: 10 * time.Millisecond}
	if opt.Quick {
		o.Requests = 150
	}
	fmt.Fprintln(w, "health-check: the Role of the Load Balancer lesson (seed 000) on switchyard's XDP balancer")
	fmt.Fprintln(w, "setup: 3 backend namespaces behind the XDP VIP, the lab's daemon (`switchyard lb run`), one client")
	fmt.Fprintf(w, "sending %d requests in sequence, %s apart, a new connection each; after a third of them be2's app\n", o.Requests, o.Gap)
	fmt.Fprintln(w, "process is killed. Health check as the lesson's assumption Y3: every 200 ms, 1 failure = down,")
	fmt.Fprintln(w, "100 ms timeout.")
	if opt.Quick {
		fmt.Fprintln(w, "QUICK run: 150 requests instead of 600.")
	}
	start := time.Now()
	runs, err := l4exp.HealthCheck(ctx, o)
	if err != nil {
		return fmt.Errorf("health-check: %w", err)
	}
	fmt.Fprintf(w, "\n%-13s %6s %9s %8s  %-22s %s\n", "health check", "sent", "answered", "rate", "after the kill", "failure window")
	for _, r := range runs {
		mode := "off"
		if r.Health {
			mode = "on (200ms)"
		}
		fmt.Fprintf(w, "%-13s %6d %9d %7.1f%%  %4d of %4d (%5.1f%%)   %s\n", mode, r.Sent, r.Answered, 100*float64(r.Answered)/float64(r.Sent),
			r.AnsweredAfter, r.SentAfter, 100*float64(r.AnsweredAfter)/float64(max(1, r.SentAfter)), r.Window.Round(time.Millisecond))
	}
	fmt.Fprint(w, `
the lesson's own figures: the seed's copy of this lesson is cut off right after its client's code,
before its result table, so no answered-request rate of the lesson can be quoted here. What it
sets up, and what this run reproduces: 3 replicas, round robin, a health check every 200 ms with
1 failure marking a replica down (Y3), a sequential client, one replica going down mid-run.
expected from that setup, and what to compare: without health checks the balancer keeps sending
the dead replica its share (here: every new connection Maglev hashes to it, about a third), so
about a third of the requests after the kill fail for as long as the run lasts; with them only the
requests inside the detection window fail (at most interval + timeout, about 300 ms).
differences: the lesson's balancer is an L7 proxy choosing per request; switchyard's is L4 and
chooses per connection, which is why the client opens a new connection per request here.
`)
	fmt.Fprintf(w, "took %s\n", time.Since(start).Round(time.Millisecond))
	if opt.JSON {
		return json.NewEncoder(w).Encode(map[string]any{"experiment": "health-check", "quick": opt.Quick, "runs": runs})
	}
	return nil
}
