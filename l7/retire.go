package l7

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// retire ends a state a reload replaced. Its health checkers stop at once. Its pools' upstream
// connections are closed when the last request still running on each pool has finished: a
// pool's in-flight gate is the reference count (every engine holds it from admission to the end
// of the response), so nothing waits on a timer and nothing else of the old state is kept. The
// watcher holds only the pools, never the state, so the route table, the routes' runtime and
// the configuration are garbage as soon as no request uses them.
//
// A request that loaded the old state just before the swap may take its pool's gate a moment
// after the count was seen at zero; the count must stay zero over a settle period before the
// pool is closed. The goroutine engine's connections are marked closed at once (a connection returned
// later is closed instead of pooled); net/http's transport reopens its idle pool on the next
// request, so it is closed once more when the pool is done.
func (s *Server) retire(old, cur *state) {
	old.cancel()
	forget := s.forgetSeries(old, cur)
	pools := make([]*pool, 0, len(old.pools))
	for _, p := range old.pools {
		if p.up != nil {
			p.up.closeIdle(true)
		}
		if p.h2up != nil {
			p.h2up.closeIdle(true)
		}
		pools = append(pools, p)
	}
	limit := old.cfg.Timeouts.Total + time.Second // no request outlives its total timeout
	go func() {
		closeWhenIdle(pools, limit)
		forget() // after the last request on the old pools was counted
	}()
}

// retireSettle is how long a retired pool's in-flight count must stay zero before it is closed.
const retireSettle = 50 * time.Millisecond

// closeWhenIdle closes each pool once its in-flight count has stayed zero for retireSettle, and
// every remaining one after limit.
func closeWhenIdle(pools []*pool, limit time.Duration) {
	deadline := time.Now().Add(limit)
	idleSince := make([]time.Time, len(pools))
	for len(pools) > 0 {
		now := time.Now()
		for i := 0; i < len(pools); i++ {
			p := pools[i]
			switch {
			case p.gate.InFlight() > 0 && now.Before(deadline):
				idleSince[i] = time.Time{}
				continue
			case idleSince[i].IsZero() && now.Before(deadline):
				idleSince[i] = now
				continue
			case now.Sub(idleSince[i]) < retireSettle && now.Before(deadline):
				continue
			}
			p.closeIdle()
			last := len(pools) - 1
			pools[i], idleSince[i] = pools[last], idleSince[last]
			pools[last] = nil
			pools, idleSince = pools[:last], idleSince[:last]
			i--
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// forgetSeries returns a function deleting the metric series of routes, pools and backends
// that old had and cur has not, so that a configuration whose route names change on every
// reload (generated names) does not grow the registry without bound, and a removed backend does
// not keep reporting its last health. Series of what both have are kept, with their counts. The
// deletion runs once the old pools are idle (a request ending on them would create its series
// again); it holds only the label values, not the states.
func (s *Server) forgetSeries(old, cur *state) func() {
	m := s.metrics
	type series struct {
		vec    *prometheus.MetricVec
		labels prometheus.Labels
	}
	var gone []series
	drop := func(vec *prometheus.MetricVec, kv ...string) {
		l := prometheus.Labels{}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		gone = append(gone, series{vec, l})
	}
	routePools := map[string]map[string]bool{} // the pools each current route sends to
	for _, r := range cur.cfg.Routes {
		routePools[r.Name] = map[string]bool{}
		for _, sp := range r.Splits() {
			routePools[r.Name][sp.Pool] = true
		}
	}
	for _, r := range old.cfg.Routes {
		pools, kept := routePools[r.Name]
		if !kept {
			drop(m.limited.MetricVec, "route", r.Name)
			drop(m.requests.MetricVec, "route", r.Name)
		}
		for _, sp := range r.Splits() {
			if !pools[sp.Pool] {
				drop(m.duration.MetricVec, "route", r.Name, "pool", sp.Pool)
				drop(m.requests.MetricVec, "route", r.Name, "pool", sp.Pool)
			}
		}
	}
	for name, op := range old.pools {
		np := cur.pools[name]
		if np == nil {
			drop(m.shed.MetricVec, "scope", name)
			for _, vec := range []*prometheus.MetricVec{m.requests.MetricVec, m.retries.MetricVec, m.ejections.MetricVec, m.healthy.MetricVec} {
				drop(vec, "pool", name)
			}
			continue
		}
		keep := map[string]bool{}
		for _, b := range np.backends {
			keep[b.Address] = true
		}
		for _, b := range op.backends {
			if !keep[b.Address] {
				for _, vec := range []*prometheus.MetricVec{m.requests.MetricVec, m.ejections.MetricVec, m.healthy.MetricVec} {
					drop(vec, "pool", name, "backend", b.Address)
				}
			}
		}
	}
	return func() {
		for _, g := range gone {
			g.vec.DeletePartialMatch(g.labels)
		}
	}
}
