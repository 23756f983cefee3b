package experiment

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/switchyard/switchyard/lab/experiment/edge/minicdn"
)

func init() {
	Register(Experiment{
		Name:    "mini-cdn",
		Stop:    "edge",
		Summary: "the Mini-CDN (seed 004): l7 router with a consistent-hash ring over 3 edges in front of a file origin; hit ratio, HIT/MISS latency, load shed, ring vs round robin, an edge dying",
		Run:     runMiniCDN,
	})
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func runMiniCDN(ctx context.Context, w io.Writer, opt Options) error {
	p := minicdn.FullParams()
	if opt.Quick {
		p = minicdn.QuickParams()
		fmt.Fprintln(w, "QUICK RUN: a smaller trace and load; compare ratios, not counts.")
	}
	fmt.Fprintf(w, "mini-cdn: client -> router (switchyard l7, hash by path, 100 virtual nodes per edge, /healthz every %v, fall 2) ->\n", p.HealthInterval)
	fmt.Fprintf(w, "  3 edges (switchyard edge: disk tier, TTL 600 s, memory %d objects with eviction lru) -> origin (%d files of %d B, +%v per answer)\n",
		p.MemoryObjects, p.Files, p.FileBytes, p.OriginDelay)
	fmt.Fprintf(w, "trace: %d GETs, Zipf s=1.1, %d clients; all real HTTP on loopback in one process\n\n", p.Requests, p.Workers)
	r, err := minicdn.Run(ctx, p)
	if err != nil {
		return err
	}
	ch, rr := r.Consistent, r.RoundRobin
	fmt.Fprintln(w, "balance     | hit ratio | HIT p50 / p95       | MISS p50 / p95      | origin requests (distinct files)")
	fmt.Fprintln(w, "------------|-----------|---------------------|---------------------|---------------------------------")
	for _, row := range []struct {
		name string
		t    minicdn.TraceResult
	}{{"consistent", ch}, {"round robin", rr}} {
		fmt.Fprintf(w, "%-11s | %9.4f | %8s / %8s | %8s / %8s | %d (%d)\n", row.name, row.t.HitRatio,
			ms(row.t.Hit.P50), ms(row.t.Hit.P95), ms(row.t.Miss.P50), ms(row.t.Miss.P95), row.t.OriginRequests, r.Distinct)
	}
	fmt.Fprintf(w, "round robin asks the origin x%.2f as often: each file is cached on every edge instead of one\n\n",
		float64(rr.OriginRequests)/float64(max(ch.OriginRequests, 1)))
	s := r.Shed
	fmt.Fprintf(w, "load shed: budget %d in flight, %d clients x %d GETs of an uncacheable path (origin %v, each client pausing as long after every answer): %d served, %d shed (rate %.4f),\n",
		s.Budget, p.ShedClients, p.ShedPerClient, p.SlowDelay, s.OK, s.Shed, s.Rate)
	fmt.Fprintf(w, "  %d of the shed 503s carry X-Load-Shed: 1 and Retry-After; %d other answers\n\n", s.Marked, s.Other)
	d := r.Death
	fmt.Fprintf(w, "edge death: edge 2 (%s) closed on a warm ring\n", d.Edge)
	fmt.Fprintf(w, "  %d POSTs right after: %d failed (502, never retried), %d carried X-Edge-Failover\n", d.POSTs, d.POSTErrors, d.POSTFailovers)
	fmt.Fprintf(w, "  %d GETs (every file): %d errors, %d retried once on the next edge (X-Edge-Failover)\n", d.GETs, d.GETErrors, d.Failovers)
	fmt.Fprintf(w, "  ring dropped it %s after the kill (probes every %v, fall 2)\n", ms(d.RingDrop), p.HealthInterval)
	fmt.Fprintf(w, "  origin requests since: %d = %d files never asked before + %d cached files of the dead edge refetched on their new edge\n",
		d.Refetched, d.NeverCached, d.Moved)
	fmt.Fprintf(w, "  (%.0f%% of the %d cached files moved; the rest stayed on their edge); a pass over every file now: hit ratio %.4f\n",
		100*float64(d.Moved)/float64(max(r.Distinct, 1)), r.Distinct, d.AfterHitRatio)
	fmt.Fprintln(w, `
The seed's results, now measured: the hit ratio is the trace's (each file misses once per edge that
holds it); a HIT skips the origin's delay; above the in-flight budget the router answers 503 at once
instead of queueing. Consistent hashing keeps one copy per file, so the origin sees each file once;
round robin copies it to every edge. When an edge dies, only its keys move (about a third), GET and
HEAD fail over while the probes catch up, and POST fails rather than risk running twice.
Latencies are client-side through two proxies on a shared, busy machine: compare them within a run.`)
	if opt.JSON {
		return json.NewEncoder(w).Encode(r)
	}
	return nil
}
