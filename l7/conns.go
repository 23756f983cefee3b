package l7

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/connlimit"
	"github.com/switchyard/switchyard/l7/core"
)

// Descriptor exhaustion must not take healthy backends down, nor turn into 502s for clients
// being served. A proxy that opens sockets until socket(2) or accept(2) fails with EMFILE has
// none left for its health checks: every check fails, every backend goes down. So the proxy
// raises its soft descriptor limit to the hard one at start and counts client connections and
// the upstream connections dialled for them against one budget (internal/connlimit): the limit
// minus a reserve that only health checks, listeners and logs use. Clients are also capped by
// limits.max_connections. A client past the budget gets 503 and a close; a request whose
// upstream dial is past it, or fails with a local EMFILE or ENFILE, gets 503 with Retry-After
// (shed, like max_in_flight) and is never counted against the backend (core.LocalResource).

// overloadAnswer is what a client connection over the budget gets before it is closed.
var overloadAnswer = core.ErrorResponse(nil, 503, "overloaded (connection limit); retry later", core.ShedHeaders, true)

// localShedMsg answers a request not sent for want of the proxy's own descriptors.
const localShedMsg = "overloaded (proxy out of descriptors); retry later"

// newBudget cuts the connection budget from the descriptor limit, raised to the hard one, and
// registers its metrics.
func (s *Server) newBudget(maxConnections int) *connlimit.Budget {
	limit := s.fdLimit
	if limit == 0 {
		limit = connlimit.RaiseNoFile()
	}
	b := connlimit.New(connlimit.Config{Limit: limit, MaxConnections: maxConnections, Upstreams: true, Answer: overloadAnswer})
	b.OnRefuse = s.metrics.shed.WithLabelValues("connections").Inc
	b.OnShed = s.metrics.shed.WithLabelValues("upstream_connections").Inc
	b.Reclaim = s.dropIdleUpstreams
	s.metrics.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_l7_client_connections",
		Help: "Open client connections (counted against limits.max_connections and the descriptor budget).",
	}, func() float64 { return float64(b.Clients()) }), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_l7_upstream_connections",
		Help: "Open upstream connections of the proxy (counted against the descriptor budget; health checks are not).",
	}, func() float64 { return float64(b.Upstreams()) }))
	return b
}

// withDescriptorLimit cuts the connection budget from limit instead of the process's
// descriptor limit (tests: a small budget without lowering the test binary's own limit).
func withDescriptorLimit(limit uint64) Option { return func(s *Server) { s.fdLimit = limit } }

// dropIdleUpstreams closes the idle upstream connections of every pool and engine, for a dial
// that found the budget used up: the goroutine engine's and net/http's at once, the event loops'
// when each loop next turns (a dial retried then finds their places free).
func (s *Server) dropIdleUpstreams() {
	st := s.state.Load()
	if st == nil {
		return // still being built
	}
	for _, p := range st.pools {
		if p.up != nil {
			p.up.closeIdle(false)
		}
		if p.h2up != nil {
			p.h2up.closeIdle(false)
		}
		if t, ok := p.transport.(interface{ CloseIdleConnections() }); ok {
			t.CloseIdleConnections()
		}
	}
	s.dropIdleLoops()
}
