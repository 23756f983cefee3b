package edgelab

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/edge"
	"github.com/switchyard/switchyard/edge/relay"
)

// The tiered-cache world (Cloudflare's tiered-cache posts, seed 003): two origins, three
// candidate upper tiers and six lower edges in three regions, every link a user-space delay
// relay. One-way delays in milliseconds:
var (
	// TieredOrigins are the two origins' host names.
	TieredOrigins = [2]string{"shop.example", "media.example"}
	// upperToOrigin[j][o]: upper tier j to origin o. shop is near U1, media near U3; U2 is
	// second for both.
	upperToOrigin = [3][2]int{{4, 30}, {12, 18}, {35, 5}}
	// lowerToUpper[i][j]: lower i (regions 0,0,1,1,2,2) to upper j: 2 ms in its region, 12 ms
	// to a neighbouring one, 20 ms across.
	lowerToUpper = [6][3]int{{2, 12, 20}, {2, 12, 20}, {12, 2, 12}, {12, 2, 12}, {20, 12, 2}, {20, 12, 2}}
	// lowerToOrigin[i][o]: lower i straight to origin o (no tiering, and the last fallback).
	lowerToOrigin = [6][2]int{{8, 32}, {8, 32}, {16, 22}, {16, 22}, {34, 8}, {34, 8}}
)

// TierNames name the three candidate upper tiers.
var TierNames = [3]string{"U1", "U2", "U3"}

// TieredParams size a tiered-cache run.
type TieredParams struct {
	// PerLower is the number of requests each lower edge's client sends (in order).
	PerLower int
	// Objects is the number of distinct objects per origin (requested with a Zipf law).
	Objects int
	// BodyBytes is each object's size.
	BodyBytes int
	// Probe is the re-probe interval of the lower edges' tiers.
	Probe time.Duration
}

// TieredLessonParams is the full run: 6 x 300 requests over 2 x 60 objects of 4 KB.
func TieredLessonParams() TieredParams {
	return TieredParams{PerLower: 300, Objects: 60, BodyBytes: 4096, Probe: time.Second}
}

// TieredQuickParams is the short run: 6 x 80 requests over 2 x 20 objects.
func TieredQuickParams() TieredParams {
	return TieredParams{PerLower: 80, Objects: 20, BodyBytes: 4096, Probe: time.Second}
}

// TieredResult is one scenario's figures.
type TieredResult struct {
	// Scenario is none, generic, smart or fallback (smart with the shop's primary killed
	// half-way).
	Scenario string
	// Requests is the number of client requests; Errors those not answered 200.
	Requests, Errors int
	// OriginRequests counts requests reaching each origin (probes excluded), Probes the
	// latency probes (HEAD /) the upper tiers sent there.
	OriginRequests, Probes [2]int64
	// ReachedFrom lists, per origin, the upper tiers (or "direct") whose requests reached it,
	// with counts.
	ReachedFrom [2]map[string]int64
	// P50 and P95 are client latencies over the whole trace.
	P50, P95 time.Duration
	// MissP50 and MissP95 are the latencies of the requests the lower edge answered MISS (the
	// ones the topology acts on).
	MissP50, MissP95 time.Duration
	// AfterKillP50 and AfterKillP95 cover the second half (fallback scenario only).
	AfterKillP50, AfterKillP95 time.Duration
	// Primary and Secondary are the tiers the lower edges chose per origin (smart, fallback;
	// the first lower's view, and AllAgree says every lower chose the same).
	Primary, Secondary [2]string
	AllAgree           bool
	// After the kill: the shop's primary and secondary at the first lower after its re-probe.
	PrimaryAfter, SecondaryAfter string
	// Saved is the origin requests the upper tiers saved (lower fetches answered from an
	// upper tier's cache), Fallbacks the tier attempts that failed over.
	Saved, Fallbacks int64
	// OriginBytes are body bytes the origins sent (excluding probes); ServedBytes the body
	// bytes the lower edges sent to clients.
	OriginBytes, ServedBytes int64
}

// tieredOrigin is one origin with a listener per source (each upper and lower edge), so its
// own counters say who reached it.
type tieredOrigin struct {
	host    string
	body    []byte
	mu      sync.Mutex
	by      map[string]int64
	probes  int64
	bytes   int64
	servers []*httptest.Server
}

func newTieredOrigin(host string, size int) *tieredOrigin {
	return &tieredOrigin{host: host, body: []byte(strings.Repeat("x", size)), by: map[string]int64{}}
}

// listener starts a listener whose requests are counted under source.
func (o *tieredOrigin) listener(source string) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		if r.Method == http.MethodHead && r.URL.Path == "/" {
			o.probes++
		} else {
			o.by[source]++
			o.bytes += int64(len(o.body))
		}
		o.mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(o.body)
	}))
	o.servers = append(o.servers, s)
	return strings.TrimPrefix(s.URL, "http://")
}

func (o *tieredOrigin) close() {
	for _, s := range o.servers {
		s.Close()
	}
}

// tieredWorld is one scenario's edges and relays.
type tieredWorld struct {
	origins [2]*tieredOrigin
	uppers  [3]*edge.Edge
	lowers  [6]*edge.Edge
	relays  []*relay.Relay
	tierOf  map[string]string // relay base URL -> upper tier name, for the report
}

func (w *tieredWorld) relay(target string, ms int) (string, error) {
	r, err := relay.Start("127.0.0.1:0", target, time.Duration(ms)*time.Millisecond)
	if err != nil {
		return "", err
	}
	w.relays = append(w.relays, r)
	return "http://" + r.Addr(), nil
}

func (w *tieredWorld) close() {
	for _, e := range w.lowers {
		if e != nil {
			e.Close()
		}
	}
	for _, e := range w.uppers {
		if e != nil {
			e.Close()
		}
	}
	for _, r := range w.relays {
		r.Close()
	}
	for _, o := range w.origins {
		o.close()
	}
}

func startQuietEdge(cfg edge.Config) (*edge.Edge, error) {
	cfg.Listen = "127.0.0.1:0"
	cfg.Tiers.Token = tierToken
	cfg.Tiers.PlaintextToken = true // tiers on loopback in the lab: nobody else reads it
	e, err := edge.New(cfg, edge.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	if err := e.Start(); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// buildTiered starts the origins, the three upper tiers and the six lower edges with the given
// topology ("none", "generic" or "smart") and every relay between them.
func buildTiered(p TieredParams, topology string) (*tieredWorld, error) {
	w := &tieredWorld{tierOf: map[string]string{}}
	for o, h := range TieredOrigins {
		w.origins[o] = newTieredOrigin(h, p.BodyBytes)
	}
	for j := range w.uppers {
		var ocs []edge.OriginConfig
		for o, org := range w.origins {
			u, err := w.relay(org.listener(TierNames[j]), upperToOrigin[j][o])
			if err != nil {
				return w, err
			}
			ocs = append(ocs, edge.OriginConfig{Hosts: []string{org.host}, URL: u})
		}
		e, err := startQuietEdge(edge.Config{Origins: ocs})
		if err != nil {
			return w, err
		}
		w.uppers[j] = e
	}
	for i := range w.lowers {
		if err := w.startLower(i, p, topology); err != nil {
			return w, err
		}
	}
	return w, nil
}

func (w *tieredWorld) startLower(i int, p TieredParams, topology string) error {
	var cands []string
	for j, up := range w.uppers {
		u, err := w.relay(up.Addr(), lowerToUpper[i][j])
		if err != nil {
			return err
		}
		cands = append(cands, u)
		w.tierOf[u] = TierNames[j]
	}
	var ocs []edge.OriginConfig
	for o, org := range w.origins {
		u, err := w.relay(org.listener("L"+strconv.Itoa(i+1)), lowerToOrigin[i][o])
		if err != nil {
			return err
		}
		tc := edge.TierConfig{Topology: topology, ProbeInterval: edge.Duration(p.Probe)}
		if topology != edge.TopologyNone {
			tc.Candidates = cands
		}
		ocs = append(ocs, edge.OriginConfig{Hosts: []string{org.host}, URL: u, Tiers: tc})
	}
	e, err := startQuietEdge(edge.Config{Origins: ocs})
	if err != nil {
		return err
	}
	w.lowers[i] = e
	return nil
}

// tieredTrace is lower i's fixed request sequence: origin and object, Zipf-distributed
// (s = 1.1) from a seed of its own, the same on every run.
func tieredTrace(i int, p TieredParams) [][2]int {
	r := rand.New(rand.NewSource(int64(1000 + i)))
	z := rand.NewZipf(r, 1.1, 1, uint64(p.Objects-1))
	out := make([][2]int, p.PerLower)
	for k := range out {
		out[k] = [2]int{r.Intn(2), int(z.Uint64())}
	}
	return out
}

// TieredScenarios are the runs of the experiment, in order.
var TieredScenarios = []string{"none", "generic", "smart", "fallback"}

// RunTiered runs one scenario on a fresh world (cold caches): every lower edge's client sends
// its trace, the first half, then (fallback only: the shop's primary upper tier is killed) the
// second half.
func RunTiered(ctx context.Context, p TieredParams, scenario string) (TieredResult, error) {
	res := TieredResult{Scenario: scenario}
	topology := scenario
	if scenario == "fallback" {
		topology = edge.TopologySmart
	}
	if !slices.Contains(TieredScenarios, scenario) {
		return res, fmt.Errorf("run tiered-cache: scenario %q is not one of %v", scenario, TieredScenarios)
	}
	w, err := buildTiered(p, topology)
	defer w.close()
	if err != nil {
		return res, fmt.Errorf("run tiered-cache: %w", err)
	}
	if topology == edge.TopologySmart {
		for _, lo := range w.lowers {
			lo.ProbeTiers()
		}
		res.AllAgree = true
		for o := range TieredOrigins {
			res.Primary[o], res.Secondary[o] = w.choice(0, o)
			for i := range w.lowers {
				if a, b := w.choice(i, o); a != res.Primary[o] || b != res.Secondary[o] {
					res.AllAgree = false
				}
			}
		}
	}
	half := p.PerLower / 2
	first, err := w.drive(ctx, p, 0, half)
	if err != nil {
		return res, err
	}
	if scenario == "fallback" {
		j := slices.Index(TierNames[:], res.Primary[0])
		if j < 0 {
			return res, fmt.Errorf("run tiered-cache: no primary upper tier chosen for %s", TieredOrigins[0])
		}
		w.uppers[j].Close() // killed mid-run: listeners closed, its relays now fail every connection
		w.uppers[j] = nil
	}
	second, err := w.drive(ctx, p, half, p.PerLower)
	if err != nil {
		return res, err
	}
	if scenario == "fallback" {
		res.AfterKillP50, res.AfterKillP95 = percentiles(second.lat)
		w.lowers[0].ProbeTiers()
		res.PrimaryAfter, res.SecondaryAfter = w.choice(0, 0)
	}
	all := append(first.lat, second.lat...)
	res.Requests, res.Errors = len(all), first.errors+second.errors
	res.P50, res.P95 = percentiles(all)
	res.MissP50, res.MissP95 = percentiles(append(first.miss, second.miss...))
	w.collect(&res)
	return res, nil
}

// choice names lower i's primary and secondary upper tier for origin o.
func (w *tieredWorld) choice(i, o int) (string, string) {
	for _, s := range w.lowers[i].OriginStats() {
		if s.Origin == TieredOrigins[o] {
			return w.tierOf[s.Primary], w.tierOf[s.Secondary]
		}
	}
	return "", ""
}

// collect reads the origins' and the lower edges' counters into res.
func (w *tieredWorld) collect(res *TieredResult) {
	for o, org := range w.origins {
		org.mu.Lock()
		res.ReachedFrom[o] = map[string]int64{}
		for src, n := range org.by {
			if strings.HasPrefix(src, "L") {
				src = "direct"
			}
			res.ReachedFrom[o][src] += n
			res.OriginRequests[o] += n
		}
		res.Probes[o] = org.probes
		res.OriginBytes += org.bytes
		org.mu.Unlock()
	}
	for _, lo := range w.lowers {
		for _, s := range lo.OriginStats() {
			res.Saved += s.UpperHits
			res.Fallbacks += s.Fallbacks
			res.ServedBytes += s.Lower.BytesServed
		}
	}
}

// phase is what one half of the trace measured.
type phase struct {
	lat, miss []time.Duration // every request; those the lower edge answered MISS
	errors    int
}

// drive sends requests [from, to) of every lower edge's trace, the six clients in parallel and
// each one in order, and returns the latencies.
func (w *tieredWorld) drive(ctx context.Context, p TieredParams, from, to int) (phase, error) {
	var mu sync.Mutex
	var out phase
	var wg sync.WaitGroup
	for i, lo := range w.lowers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 2, DisableCompression: true}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for _, rq := range tieredTrace(i, p)[from:to] {
				if ctx.Err() != nil {
					return
				}
				d, label, ok := tieredGet(ctx, c, lo, TieredOrigins[rq[0]], "/obj/"+strconv.Itoa(rq[1]))
				mu.Lock()
				out.lat = append(out.lat, d)
				if label == edge.Miss {
					out.miss = append(out.miss, d)
				}
				if !ok {
					out.errors++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out, ctx.Err()
}

// tieredGet times one request and returns its X-Cache and whether it was answered 200 with a
// whole body.
func tieredGet(ctx context.Context, c *http.Client, e *edge.Edge, host, path string) (time.Duration, string, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL()+path, nil)
	if err != nil {
		return 0, "", false
	}
	req.Host = host
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return time.Since(start), "", false
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start), resp.Header.Get("X-Cache"), err == nil && resp.StatusCode == http.StatusOK
}

// percentiles returns the 50th and 95th percentile (nearest rank).
func percentiles(d []time.Duration) (p50, p95 time.Duration) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[max(0, int(math.Ceil(q*float64(len(s))))-1)] }
	return at(0.50), at(0.95)
}

// tierToken is the tiers.token shared by every edge of the experiments.
const tierToken = "edgelab-tiers"
