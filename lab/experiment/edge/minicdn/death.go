package minicdn

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/edge"
	"github.com/switchyard/switchyard/lab/cdn"
)

// runDeath kills edge 2 of a warm consistent-hash world. Right after the kill (before the
// probes notice) POSTs to its keys fail, as they are never retried, and GETs fail over to the
// next edge on the ring with X-Edge-Failover; once two probes failed the ring drops it, and only
// its keys moved (refetched from the origin once), the others stay where they were cached.
func (w *world) runDeath(ctx context.Context) (DeathResult, error) {
	r := DeathResult{Edge: w.edges[1].Addr()}
	before := w.origin.requests.Load()
	w.edges[1].Close()
	killed := time.Now()
	c := newClient(w.p.Workers)
	defer c.CloseIdleConnections()
	for i := 0; i < 30; i++ { // POSTs first, while the dead edge is still a ring member
		a := do(ctx, c, http.MethodPost, w.router+"/upload/"+strconv.Itoa(i))
		r.POSTs++
		if a.err != nil || a.code != http.StatusOK {
			r.POSTErrors++
		}
		if a.failover != "" {
			r.POSTFailovers++
		}
	}
	all := make([]int, w.p.Files)
	for i := range all {
		all[i] = i
	}
	var failedOver string
	for i, a := range fanOut(ctx, c, w.p.Workers, w.fileReqs(all)) {
		r.GETs++
		if a.err != nil || a.code != http.StatusOK {
			r.GETErrors++
		}
		if a.failover == "1" {
			r.Failovers++
			failedOver = w.router + cdn.FilePath(all[i])
		}
	}
	if failedOver != "" {
		// Membership follows the probes: wait until the dead edge's key is no longer sent to it.
		deadline := time.Now().Add(15 * time.Second)
		for {
			a := do(ctx, c, http.MethodGet, failedOver)
			if a.err == nil && a.code == http.StatusOK && a.failover == "" {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return r, errors.New("the router kept the dead edge in its ring for 15 s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	r.RingDrop = time.Since(killed)
	hits := 0
	for _, a := range fanOut(ctx, c, w.p.Workers, w.fileReqs(all)) {
		if a.err == nil && a.cache == edge.Hit {
			hits++
		}
	}
	r.AfterHitRatio = float64(hits) / float64(len(all))
	r.Refetched = w.origin.requests.Load() - before
	return r, ctx.Err()
}
