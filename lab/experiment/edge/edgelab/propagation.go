package edgelab

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/edge"
)

// PropagationParams are the propagation lesson's assumptions, scaled as asked.
type PropagationParams struct {
	// Edges is T10 (12).
	Edges int
	// Common is T11 (20 objects requested from every edge).
	Common int
	// Unique is the previous lesson's 20,046 distinct responses, each requested from one edge (T12).
	Unique int
	// TTLRounds, Rounds and Update are T1 (300), the run length (900) and the round at which the
	// common object's version changes (100).
	TTLRounds, Rounds, Update int
	// Round is the wall time of one round; TTLRounds*Round must be whole seconds, since max-age is.
	Round time.Duration
}

// LessonParams returns the lesson's full-size parameters (a round is 10 ms, so the TTL is 3 s).
func LessonParams() PropagationParams {
	return PropagationParams{Edges: 12, Common: 20, Unique: 20_046, TTLRounds: 300, Rounds: 900, Update: 100, Round: 10 * time.Millisecond}
}

// QuickParams returns a scaled-down run: 4 edges, 500 unique objects, a 1 s TTL.
func QuickParams() PropagationParams {
	return PropagationParams{Edges: 4, Common: 20, Unique: 500, TTLRounds: 300, Rounds: 900, Update: 100, Round: time.Second / 300}
}

// PropagationResult is one row of the mode table.
type PropagationResult struct {
	// Mode is pull, push or hybrid.
	Mode string
	// OriginRequests are pulls: client misses that reached the origin.
	OriginRequests int64
	// Pushed counts copies the origin sent to edges by push (before the update).
	Pushed int64
	// Wasted counts pushed copies no client ever asked that edge for.
	Wasted int64
	// StaleRounds counts (edge, round) pairs that served the old version after the update.
	StaleRounds int64
	// Messages is origin requests plus pushed copies plus the update's pushes.
	Messages int64
	// UniqueHits counts requests for unique objects answered from a pushed copy.
	UniqueHits int64
}

const site = "cdn.example"

func commonPath(i int) string { return "/c/" + strconv.Itoa(i) }
func uniquePath(i int) string { return "/u/" + strconv.Itoa(i) }

// RunPropagation measures one mode ("pull", "push" or "hybrid": common pushed, unique pulled)
// on real edges in front of one origin.
func RunPropagation(ctx context.Context, mode string, p PropagationParams) (PropagationResult, error) {
	if mode != "pull" && mode != "push" && mode != "hybrid" {
		return PropagationResult{}, fmt.Errorf("run propagation: mode %q is not pull, push or hybrid", mode)
	}
	ttl := (time.Duration(p.TTLRounds) * p.Round).Round(time.Millisecond)
	if ttl%time.Second != 0 || ttl == 0 {
		return PropagationResult{}, fmt.Errorf("run propagation: TTL %v is not whole seconds; max-age cannot express it", ttl)
	}
	pushCommon, pushUnique := mode != "pull", mode == "push"
	// Pushed content is kept current by pushes, so it carries a long lifetime; pulled content
	// carries the TTL that bounds its staleness.
	o := newCountingOrigin(func(path string) int {
		if (strings.HasPrefix(path, "/c/") && pushCommon) || (strings.HasPrefix(path, "/u/") && pushUnique) {
			return 3600
		}
		return int(ttl / time.Second)
	})
	defer o.Close()
	edges := make([]*edge.Edge, p.Edges)
	for k := range edges {
		e, err := startEdge(o.URL, 0)
		if err != nil {
			return PropagationResult{}, fmt.Errorf("run propagation: %w", err)
		}
		defer e.Close()
		edges[k] = e
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	res := PropagationResult{Mode: mode}

	if err := propagateCommon(ctx, client, edges, o, p, pushCommon); err != nil {
		return res, err
	}
	uniqueHits, err := propagateUnique(ctx, client, edges, o, p, pushUnique)
	if err != nil {
		return res, err
	}
	res.UniqueHits = uniqueHits
	res.Pushed = o.prefetches.Load()
	res.Wasted = res.Pushed - res.UniqueHits - hitsOnPushedCommon(p, pushCommon)

	// Phase 3: the timed run for the shell. Every edge asks for it every round; at round Update
	// the origin changes it (and, when pushed, pushes the new version to every edge).
	stale, updates, err := timedRun(ctx, client, edges, o, p, pushCommon)
	if err != nil {
		return res, err
	}
	res.StaleRounds = stale
	res.OriginRequests = o.requests.Load()
	res.Messages = res.OriginRequests + res.Pushed + updates
	return res, nil
}

// propagateCommon is phase 1, the common class. Pushed: every edge gets all of it. Pulled:
// every edge asks once for each object but the shell (/c/0), whose first pull happens in the
// timed phase.
func propagateCommon(ctx context.Context, client *http.Client, edges []*edge.Edge, o *countingOrigin, p PropagationParams, pushCommon bool) error {
	var common []string
	for i := 0; i < p.Common; i++ {
		common = append(common, "http://"+site+commonPath(i))
	}
	if pushCommon {
		if err := pushAll(ctx, edges, o, common); err != nil {
			return err
		}
	} else {
		for _, e := range edges {
			for i := 1; i < p.Common; i++ {
				if _, _, err := fetch(ctx, client, e, commonPath(i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// propagateUnique is phase 2, the unique class: object j requested from edge j mod Edges only
// (pushed first to every edge when pushUnique). It returns the requests that hit.
func propagateUnique(ctx context.Context, client *http.Client, edges []*edge.Edge, o *countingOrigin, p PropagationParams, pushUnique bool) (int64, error) {
	if pushUnique {
		var unique []string
		for j := 0; j < p.Unique; j++ {
			unique = append(unique, "http://"+site+uniquePath(j))
		}
		if err := pushAll(ctx, edges, o, unique); err != nil {
			return 0, err
		}
	}
	var uniqueHits atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, p.Edges)
	for k, e := range edges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := k; j < p.Unique; j += p.Edges {
				cache, _, err := fetch(ctx, client, e, uniquePath(j))
				if err != nil {
					errs <- err
					return
				}
				if cache == edge.Hit {
					uniqueHits.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return uniqueHits.Load(), nil
}

// hitsOnPushedCommon: every pushed common copy is requested (every edge asks for every common
// object), so none of them is wasted.
func hitsOnPushedCommon(p PropagationParams, pushed bool) int64 {
	if !pushed {
		return 0
	}
	return int64(p.Common * p.Edges)
}

// pushAll is the origin's true push: it sends each object (its current header and body) to
// every edge's admin API (PUT /object), the edges in parallel, and counts the copies sent.
func pushAll(ctx context.Context, edges []*edge.Edge, o *countingOrigin, urls []string) error {
	var wg sync.WaitGroup
	errs := make(chan error, len(edges))
	for _, e := range edges {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := edge.AdminClient{Base: e.AdminAddr(), Token: adminToken, HTTP: &http.Client{Timeout: time.Minute}}
			for _, u := range urls {
				h, body := o.object(strings.TrimPrefix(u, "http://"+site))
				if _, err := c.PushObject(ctx, u, http.StatusOK, h, body); err != nil {
					errs <- fmt.Errorf("push %s to %s: %w", u, e.AdminAddr(), err)
					return
				}
				o.prefetches.Add(1)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// fetch requests path from an edge as a client of the site and returns X-Cache and the version
// in the body.
func fetch(ctx context.Context, c *http.Client, e *edge.Edge, path string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL()+path, nil)
	if err != nil {
		return "", 0, err
	}
	req.Host = site
	resp, err := c.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("get %s from %s: %w", path, e.Addr(), err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	buf.ReadFrom(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("get %s from %s: %s", path, e.Addr(), resp.Status)
	}
	v := 0
	if _, after, ok := strings.Cut(buf.String(), `"version":`); ok {
		v, _ = strconv.Atoi(strings.SplitN(after, ",", 2)[0])
	}
	return resp.Header.Get("X-Cache"), v, nil
}

// timedRun drives the shell's rounds and returns the stale (edge, round) count and the number of
// update pushes sent. Pulled edges start staggered as in the lesson: edge k's copy expires at
// round 1 + (k*27) mod TTL, so its first pull happens a TTL before that.
//
// Rounds are read from the clock, not counted by the loop: on a loaded machine the loop can fall
// behind, and counting its iterations would shrink the stale window that the edges' wall-clock
// expiry produces. An edge's stale rounds are the rounds from the update to the first round it
// served the old version, plus one: the (edge, round) pairs that served it after the update.
func timedRun(ctx context.Context, c *http.Client, edges []*edge.Edge, o *countingOrigin, p PropagationParams, pushed bool) (stale, updates int64, err error) {
	shell := commonPath(0)
	first := 1
	if !pushed {
		first = 1 - p.TTLRounds
	}
	start := time.Now()
	roundNow := func() int { return first + int(time.Since(start)/p.Round) }
	updateRound := 0                   // the round the update actually happened in
	lastOld := make([]int, len(edges)) // last round an edge served version 1 after the update
	for last := first - 1; ; {
		round := roundNow()
		if round == last {
			time.Sleep(time.Until(start.Add(time.Duration(round+1-first) * p.Round)))
			continue
		}
		if round > p.Rounds {
			break
		}
		last = round
		if updateRound == 0 && round >= p.Update {
			o.version.Store(2)
			updateRound = round
			if pushed {
				if err := pushAll(ctx, edges, o, []string{"http://" + site + shell}); err != nil {
					return 0, 0, err
				}
				updates = int64(len(edges))
			}
		}
		for k, e := range edges {
			if !pushed && round < 1-p.TTLRounds+(k*27)%p.TTLRounds {
				continue // this edge's first pull comes later
			}
			at := roundNow()
			_, v, err := fetch(ctx, c, e, shell)
			if err != nil {
				return 0, 0, err
			}
			if updateRound > 0 && v == 1 {
				lastOld[k] = at
			}
		}
	}
	for k := range edges {
		if lastOld[k] > 0 {
			stale += int64(lastOld[k] + 1 - updateRound)
		}
	}
	return stale, updates, nil
}

// ModelStaleRounds is the lesson's pull model (propagation/model.mjs) at the given parameters:
// the stale (edge, round) count it predicts, to print beside a scaled-down measurement.
func ModelStaleRounds(p PropagationParams) int64 {
	stale, _ := modelPull(p)
	return stale
}

// Model returns the lesson's model figures (pull, push, hybrid) at the given parameters.
func Model(p PropagationParams) []PropagationResult {
	stale, refetches := modelPull(p)
	c, u, e := int64(p.Common), int64(p.Unique), int64(p.Edges)
	pull := c*e + u + refetches
	return []PropagationResult{
		{Mode: "pull", OriginRequests: pull, StaleRounds: stale, Messages: pull},
		{Mode: "push", Pushed: (c + u) * e, Wasted: u * (e - 1), Messages: (c+u)*e + e},
		{Mode: "hybrid", OriginRequests: u, Pushed: c * e, Messages: u + c*e + e},
	}
}

// modelPull runs the model's pull loop: stale (edge, round) pairs and TTL refetches.
func modelPull(p PropagationParams) (stale, refetches int64) {
	for k := 0; k < p.Edges; k++ {
		expires, version := 1+(k*27)%p.TTLRounds, 1
		for round := 1; round <= p.Rounds; round++ {
			if round >= expires {
				version = 1
				if round >= p.Update {
					version = 2
				}
				expires = round + p.TTLRounds
				refetches++
			}
			if round >= p.Update && version == 1 {
				stale++
			}
		}
	}
	return stale, refetches
}

// RunPropagationModes runs the three modes, in parallel when parallel is set (each has its own
// origin and edges; the quick run uses it to finish in one TTL-scaled pass).
func RunPropagationModes(ctx context.Context, p PropagationParams, parallel bool) ([]PropagationResult, error) {
	modes := []string{"pull", "push", "hybrid"}
	out := make([]PropagationResult, len(modes))
	errs := make([]error, len(modes))
	var wg sync.WaitGroup
	for i, m := range modes {
		run := func() { out[i], errs[i] = RunPropagation(ctx, m, p) }
		if !parallel {
			run()
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
