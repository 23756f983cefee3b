// Package minicdn is the Mini-CDN scenario (seed 004) on switchyard's own parts: a router (the
// l7 proxy with a consistent-hash pool by path over three edges, health-probed membership, GET
// and HEAD retried once on another edge with X-Edge-Failover, POST never retried, 503 with
// X-Load-Shed above an in-flight budget) in front of three edges (disk tier, TTL, LRU memory
// eviction) in front of an origin serving files. Everything is real HTTP over loopback, in this
// process; Run measures what the seed promised and never published.
package minicdn

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/edge"
	"github.com/switchyard/switchyard/l7"
	"github.com/switchyard/switchyard/lab/cdn"
)

// Params sizes a run.
type Params struct {
	// Files is how many files the origin serves; FileBytes their size.
	Files, FileBytes int
	// Requests is the trace length (Zipf s=1.1 over the files), sent by Workers clients.
	Requests, Workers int
	// OriginDelay is added to every origin answer (the origin is far away; a hit is not).
	OriginDelay time.Duration
	// MemoryObjects bounds each edge's memory tier (LRU); the rest of a hot set is on disk.
	MemoryObjects int
	// ShedBudget is the router's in-flight budget in the load-shed run; ShedClients clients
	// send ShedPerClient requests each to an uncacheable path the origin answers in SlowDelay.
	ShedBudget, ShedClients, ShedPerClient int
	SlowDelay                              time.Duration
	// HealthInterval is the router's probe interval (two failures take an edge out).
	HealthInterval time.Duration
}

// QuickParams is the test-sized run (a few seconds).
func QuickParams() Params {
	return Params{Files: 200, FileBytes: 4096, Requests: 2000, Workers: 4, OriginDelay: 3 * time.Millisecond,
		MemoryObjects: 40, ShedBudget: 8, ShedClients: 32, ShedPerClient: 8, SlowDelay: 20 * time.Millisecond,
		HealthInterval: 200 * time.Millisecond}
}

// FullParams is the report-sized run.
func FullParams() Params {
	return Params{Files: 1000, FileBytes: 16384, Requests: 20000, Workers: 8, OriginDelay: 5 * time.Millisecond,
		MemoryObjects: 200, ShedBudget: 16, ShedClients: 64, ShedPerClient: 30, SlowDelay: 20 * time.Millisecond,
		HealthInterval: 200 * time.Millisecond}
}

// Latency is a request class's count and client-side percentiles.
type Latency struct {
	N        int
	P50, P95 time.Duration
}

// TraceResult is one pass of the trace through the router.
type TraceResult struct {
	Balance        string
	Hit, Miss      Latency
	Other          int // answers neither HIT nor MISS
	HitRatio       float64
	OriginRequests int64
}

// ShedResult is the load-shed run.
type ShedResult struct {
	Budget, Requests, OK, Shed, Marked, Other int // Marked: shed 503s with X-Load-Shed: 1 and Retry-After
	Rate                                      float64
}

// DeathResult is what happens when an edge dies.
type DeathResult struct {
	Edge                       string
	GETs, Failovers, GETErrors int
	POSTs, POSTErrors          int
	POSTFailovers              int           // must stay 0: POST is never retried
	RingDrop                   time.Duration // from the kill until POSTs to its keys succeed again
	Refetched                  int64         // origin requests after the death
	NeverCached                int           // files the trace never asked for (fetched now for the first time)
	Moved                      int64         // Refetched - NeverCached: cached files fetched again, on their new edge
	AfterHitRatio              float64       // a pass over every file once the ring dropped it
}

// Result is the whole run.
type Result struct {
	Params     Params
	Distinct   int
	Consistent TraceResult
	RoundRobin TraceResult
	Shed       ShedResult
	Death      DeathResult
}

// Run builds the scenario, measures, and tears every part down.
func Run(ctx context.Context, p Params) (Result, error) {
	res := Result{Params: p}
	tr := trace(p)
	seen := map[int]bool{}
	for _, f := range tr {
		seen[f] = true
	}
	res.Distinct = len(seen)
	for _, bal := range []string{"hash", "round_robin"} {
		w, err := build(p, bal, 10000)
		if err != nil {
			return res, err
		}
		r, err := w.runTrace(ctx, tr)
		if err == nil && bal == "hash" {
			res.Consistent = r
			if res.Shed, err = w.runShed(ctx); err == nil {
				res.Death, err = w.runDeath(ctx)
				res.Death.NeverCached = p.Files - res.Distinct
				res.Death.Moved = res.Death.Refetched - int64(res.Death.NeverCached)
			}
		} else {
			res.RoundRobin = r
		}
		w.close()
		if err != nil {
			return res, fmt.Errorf("run mini-cdn (%s): %w", bal, err)
		}
	}
	return res, nil
}

// trace is the fixed request sequence: file indexes, Zipf-distributed.
func trace(p Params) []int {
	r := rand.New(rand.NewSource(4))
	z := rand.NewZipf(r, 1.1, 1, uint64(p.Files-1))
	out := make([]int, p.Requests)
	for i := range out {
		out[i] = int(z.Uint64())
	}
	return out
}

// origin serves the files read-only from a directory, with a delay, and counts what reaches it.
type origin struct {
	srv      *httptest.Server
	requests atomic.Int64
}

func startOrigin(p Params, dir string) (*origin, error) {
	if err := cdn.WriteFiles(dir, p.Files, p.FileBytes); err != nil {
		return nil, err
	}
	o := &origin{}
	o.srv = httptest.NewServer(cdn.OriginHandler(dir, p.OriginDelay, p.SlowDelay, &o.requests))
	return o, nil
}

// world is one origin, three edges and a router.
type world struct {
	p       Params
	dir     string
	origin  *origin
	edges   []*edge.Edge
	routers []*l7.Server
	router  string // base URL of the main router
	client  *http.Client
}

func build(p Params, balance string, budget int) (w *world, err error) {
	w = &world{p: p}
	defer func() {
		if err != nil {
			w.close()
		}
	}()
	if w.dir, err = os.MkdirTemp("", "minicdn-"); err != nil {
		return w, fmt.Errorf("make temp dir: %w", err)
	}
	od := filepath.Join(w.dir, "origin")
	if err = os.Mkdir(od, 0o755); err != nil {
		return w, fmt.Errorf("make origin dir: %w", err)
	}
	if w.origin, err = startOrigin(p, od); err != nil {
		return w, err
	}
	for i := 0; i < 3; i++ {
		cfg, err := edge.ParseConfig([]byte(cdn.EdgeConfig("127.0.0.1:0", w.origin.srv.URL, filepath.Join(w.dir, "edge"+strconv.Itoa(i+1)), p.MemoryObjects)))
		if err != nil {
			return w, fmt.Errorf("edge %d config: %w", i+1, err)
		}
		e, err := edge.New(cfg, edge.WithLogger(slog.New(slog.DiscardHandler)))
		if err == nil {
			err = e.Start()
		}
		if err != nil {
			return w, fmt.Errorf("start edge %d: %w", i+1, err)
		}
		w.edges = append(w.edges, e)
	}
	if w.router, err = w.startRouter(balance, budget); err != nil {
		return w, err
	}
	w.client = newClient(p.Workers)
	return w, nil
}

func newClient(conns int) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: conns, DisableCompression: true, Proxy: nil}}
}

func (w *world) startRouter(balance string, budget int) (string, error) {
	edges := []string{w.edges[0].Addr(), w.edges[1].Addr(), w.edges[2].Addr()}
	cfg, err := l7.ParseConfig([]byte(cdn.RouterConfig("127.0.0.1:0", edges, balance, budget, w.p.HealthInterval)))
	if err != nil {
		return "", fmt.Errorf("router config: %w", err)
	}
	s, err := l7.NewServer(cfg, l7.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return "", fmt.Errorf("start router: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return "", fmt.Errorf("start router: %w", err)
	}
	go s.Serve(ln)
	w.routers = append(w.routers, s)
	return "http://" + ln.Addr().String(), nil
}

func (w *world) close() {
	for _, s := range w.routers {
		s.Close()
	}
	for _, e := range w.edges {
		e.Close()
	}
	if w.origin != nil {
		w.origin.srv.Close()
	}
	if w.client != nil {
		w.client.CloseIdleConnections()
	}
	if w.dir != "" {
		os.RemoveAll(w.dir)
	}
}

// answer is one response as the client saw it.
type answer struct {
	code             int
	cache, failover  string
	shed, retryAfter string
	took             time.Duration
	err              error
}

func do(ctx context.Context, c *http.Client, method, url string) answer {
	var a answer
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader("upload")
	}
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		return answer{err: err}
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		a.err = err
		return a
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	a.took = time.Since(start)
	a.err, a.code = err, resp.StatusCode
	a.cache, a.failover = resp.Header.Get("X-Cache"), resp.Header.Get("X-Edge-Failover")
	a.shed, a.retryAfter = resp.Header.Get("X-Load-Shed"), resp.Header.Get("Retry-After")
	return a
}

// fanOut sends every request of reqs (method, url pairs) from workers clients and returns the
// answers in order.
func fanOut(ctx context.Context, c *http.Client, workers int, reqs [][2]string) []answer {
	return fanOutThink(ctx, c, workers, reqs, 0)
}

// fanOutThink is fanOut with each client pausing think after every answer (a closed loop with
// a think time, so a shed answer does not turn into an instant resend).
func fanOutThink(ctx context.Context, c *http.Client, workers int, reqs [][2]string, think time.Duration) []answer {
	out := make([]answer, len(reqs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(reqs) || ctx.Err() != nil {
					return
				}
				out[i] = do(ctx, c, reqs[i][0], reqs[i][1])
				if think > 0 {
					time.Sleep(think)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

func (w *world) fileReqs(idx []int) [][2]string {
	out := make([][2]string, len(idx))
	for i, f := range idx {
		out[i] = [2]string{http.MethodGet, w.router + cdn.FilePath(f)}
	}
	return out
}

func (w *world) runTrace(ctx context.Context, tr []int) (TraceResult, error) {
	var r TraceResult
	var hits, misses []time.Duration
	for _, a := range fanOut(ctx, w.client, w.p.Workers, w.fileReqs(tr)) {
		if a.err != nil || a.code != http.StatusOK {
			return r, fmt.Errorf("trace request: status %d: %v", a.code, a.err)
		}
		switch a.cache {
		case edge.Hit:
			hits = append(hits, a.took)
		case edge.Miss:
			misses = append(misses, a.took)
		default:
			r.Other++
		}
	}
	r.Hit, r.Miss = percentiles(hits), percentiles(misses)
	r.HitRatio = float64(len(hits)) / float64(len(tr))
	r.OriginRequests = w.origin.requests.Load()
	return r, ctx.Err()
}

func percentiles(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return Latency{N: len(d), P50: d[len(d)/2], P95: d[len(d)*95/100]}
}

// runShed drives more concurrent clients than a second router's in-flight budget allows at an
// uncacheable path the origin answers in SlowDelay, each pausing SlowDelay between requests:
// the clients offer about ShedClients/2 requests in flight, and the router sheds what is above
// its budget at once (ShedBudget = ShedClients/4 offers twice the capacity: about half is shed).
func (w *world) runShed(ctx context.Context) (ShedResult, error) {
	base, err := w.startRouter("hash", w.p.ShedBudget)
	if err != nil {
		return ShedResult{}, err
	}
	r := ShedResult{Budget: w.p.ShedBudget}
	var reqs [][2]string
	for i := 0; i < w.p.ShedClients*w.p.ShedPerClient; i++ {
		reqs = append(reqs, [2]string{http.MethodGet, base + "/slow/" + strconv.Itoa(i)})
	}
	c := newClient(w.p.ShedClients)
	defer c.CloseIdleConnections()
	for _, a := range fanOutThink(ctx, c, w.p.ShedClients, reqs, w.p.SlowDelay) {
		r.Requests++
		switch {
		case a.err != nil:
			return r, fmt.Errorf("shed request: %w", a.err)
		case a.code == http.StatusOK:
			r.OK++
		case a.code == http.StatusServiceUnavailable && a.shed != "":
			r.Shed++
			if a.shed == "1" && a.retryAfter != "" {
				r.Marked++
			}
		default:
			r.Other++
		}
	}
	r.Rate = float64(r.Shed) / float64(r.Requests)
	return r, ctx.Err()
}
