package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/switchyard/switchyard/lab/experiment/l7/skew"
)

func init() {
	Register(Experiment{
		Name:    "l7-skew",
		Stop:    "l7",
		Summary: "six clients on persistent connections (mix 1,2,4,8,16,32) through the L7 tier: request skew and decisions per request vs. the layer-4 lesson",
		Run:     runL7Skew,
	})
}

// Figures quoted from seed 002 "Layer 4 Balancing" (the lesson's measured output).
const (
	l4EvenRequestSkew     = 1.00
	l4UnevenConnSkew      = 1.00
	l4UnevenRequestSkew   = 4.00
	l4UnevenDecisionsPerR = 0.095 // 6 decisions / 63 requests
	l4UnevenImbalance     = 1.714
	peakEdge              = 513.89 // K01 peak edge req/s
	safeRate              = 200.0  // lesson 01: Y1 x Y2 = 400 x 0.50
)

func runL7Skew(ctx context.Context, w io.Writer, opt Options) error {
	uneven := []int{1, 2, 4, 8, 16, 32}
	fmt.Fprintln(w, "l7-skew: the layer-4 lesson's six clients through switchyard's L7 proxy (real sockets on")
	fmt.Fprintln(w, "loopback, three replicas, round robin, one persistent connection per client, clients in sequence).")
	if opt.Quick {
		fmt.Fprintln(w, "QUICK run: only the uneven mix and the read/write split (63 requests each); the full run adds")
		fmt.Fprintln(w, "the even mix 10x6 and the uneven mix scaled x10 (630 requests).")
	}
	fmt.Fprintln(w)
	runs := []struct {
		mix   []int
		split bool
	}{{uneven, false}}
	if !opt.Quick {
		runs = append([]struct {
			mix   []int
			split bool
		}{{[]int{10, 10, 10, 10, 10, 10}, false}}, runs...)
		runs = append(runs, struct {
			mix   []int
			split bool
		}{[]int{10, 20, 40, 80, 160, 320}, false})
	}
	runs = append(runs, struct {
		mix   []int
		split bool
	}{uneven, true})
	var lead *skew.Result // the uneven-mix run, compared with the lesson
	for _, r := range runs {
		res, err := skew.Run(ctx, r.mix, r.split)
		if err != nil {
			return fmt.Errorf("run l7-skew mix %v: %w", r.mix, err)
		}
		res.Table(w)
		fmt.Fprintln(w)
		if !r.split && len(r.mix) == 6 && r.mix[0] == 1 {
			lead = res
		}
	}
	fmt.Fprintln(w, "beside the layer-4 lesson (seed 002, mix 1,2,4,8,16,32, 63 requests):")
	fmt.Fprintln(w, "measure                   layer 4 (lesson)   L7 (measured)")
	fmt.Fprintf(w, "replica requests          9 / 18 / 36        %d / %d / %d\n", lead.Replicas[0].Requests, lead.Replicas[1].Requests, lead.Replicas[2].Requests)
	fmt.Fprintf(w, "connection skew           %.2f               %.2f (upstream, pooled)\n", l4UnevenConnSkew, lead.ConnectionSkew())
	fmt.Fprintf(w, "request skew              %.2f               %.2f\n", l4UnevenRequestSkew, lead.RequestSkew())
	fmt.Fprintf(w, "decisions per request     %.3f              %.3f\n", l4UnevenDecisionsPerR, lead.DecisionsPerRequest())
	fmt.Fprintf(w, "imbalance factor          %.3f              %.3f\n", l4UnevenImbalance, lead.Imbalance())
	req := func(imb float64) int { return int(math.Ceil(imb * peakEdge / safeRate)) }
	fmt.Fprintf(w, "replicas for 513.89 req/s %d                  %d\n", req(l4UnevenImbalance), req(lead.Imbalance()))
	fmt.Fprintf(w, "decisions/s at Y4 = 10    %.2f              %.2f\n", peakEdge/10, peakEdge*lead.DecisionsPerRequest())
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Why the numbers differ: the lesson's layer-4 balancer decided once per client connection, so")
	fmt.Fprintln(w, "client 6's 32 requests all rode the connection it placed on k3 (request skew 4.00 over perfectly")
	fmt.Fprintln(w, "balanced connections, 1.00). The L7 tier terminates the client connection and decides again for")
	fmt.Fprintf(w, "every request, so the same mix lands %d/%d/%d and the request skew goes to %.2f (even mix: the\n",
		lead.Replicas[0].Requests, lead.Replicas[1].Requests, lead.Replicas[2].Requests, lead.RequestSkew())
	fmt.Fprintf(w, "lesson's %.2f stays 1.00). The connection column now counts the proxy's pooled upstream\n", l4EvenRequestSkew)
	fmt.Fprintln(w, "connections, one per replica reused by all six clients, not client connections, so it no longer")
	fmt.Fprintf(w, "predicts load at all. The price is the one the lesson named: %.3f decisions per request instead\n", lead.DecisionsPerRequest())
	fmt.Fprintf(w, "of %.3f (%.1f times), and every request has to be parsed to make them.\n", l4UnevenDecisionsPerR, lead.DecisionsPerRequest()/l4UnevenDecisionsPerR)
	fmt.Fprintln(w, "What it buys is in the split table: /tracking reads land only in the reads pool and /event")
	fmt.Fprintln(w, "writes only in the writes pool, a split the lesson showed impossible at layer 4. Holding the")
	fmt.Fprintf(w, "0.50 utilisation target at the peak rate needs %d replicas instead of the lesson's %d.\n", req(lead.Imbalance()), req(l4UnevenImbalance))
	fmt.Fprintln(w, "(The 000 seed's \"Role of the Load Balancer\" lesson text ends before its measurements, so only")
	fmt.Fprintln(w, "its setup, round robin with 200 ms health checks, is reproduced here, not figures.)")
	if opt.JSON {
		out, err := json.Marshal(map[string]any{
			"experiment": "l7-skew", "quick": opt.Quick, "requests": lead.Requests,
			"replica_requests": []int{lead.Replicas[0].Requests, lead.Replicas[1].Requests, lead.Replicas[2].Requests},
			"connection_skew":  lead.ConnectionSkew(), "request_skew": lead.RequestSkew(),
			"decisions_per_request": lead.DecisionsPerRequest(), "imbalance": lead.Imbalance(),
			"l4_request_skew": l4UnevenRequestSkew, "l4_decisions_per_request": l4UnevenDecisionsPerR,
		})
		if err != nil {
			return fmt.Errorf("encode l7-skew result: %w", err)
		}
		fmt.Fprintln(w, string(out))
	}
	return nil
}
