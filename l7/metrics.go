package l7

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the proxy's Prometheus series. Each Server has its own registry so several
// servers (tests, two instances in one process) never collide.
type metrics struct {
	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	retries   *prometheus.CounterVec
	shed      *prometheus.CounterVec
	limited   *prometheus.CounterVec
	ejections *prometheus.CounterVec
	healthy   *prometheus.GaugeVec
	inFlight  prometheus.Gauge
	// shedGlobal is shed{scope="global"}, resolved once for the request path.
	shedGlobal prometheus.Counter
	refused    *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	handoffs   *prometheus.CounterVec
	mirrored   *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_l7_requests_total",
			Help: "Requests answered, by route, pool, backend (\"\" when none was reached) and status code.",
		}, []string{"route", "pool", "backend", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "switchyard_l7_request_duration_seconds",
			Help:    "Time from request head to the end of the response, by route and pool.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "pool"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_l7_retries_total",
			Help: "Retries sent, and retries refused by the retry budget, by pool and outcome (sent|budget_exhausted).",
		}, []string{"pool", "outcome"}),
		shed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_l7_shed_total",
			Help: "Requests shed with 503 because an in-flight limit was reached, by scope (global or pool name).",
		}, []string{"scope"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_l7_rate_limited_total",
			Help: "Requests answered 429 by a per-client rate limit, by route.",
		}, []string{"route"}),
		ejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_l7_ejections_total",
			Help: "Passive outlier ejections, by pool and backend.",
		}, []string{"pool", "backend"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_l7_backend_healthy",
			Help: "1 when the backend passes active health checks, 0 when not.",
		}, []string{"pool", "backend"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "switchyard_l7_in_flight",
			Help: "Requests in flight through the proxy.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_l7_refused_total",
			Help: "Request heads refused before routing (smuggling shapes, oversized headers, bad paths), by status.",
		}, []string{"code"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_l7_reloads_total",
			Help: "Configuration reloads by result (ok|error); on error the old configuration stays.",
		}, []string{"result"}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_l7_loop_handoffs_total",
			Help: "Connections an event loop handed to a goroutine, by where they went: fast (the goroutine engine: a streamed upload, a host-name pool, an h2 or h2c pool) or http (what net/http serves: upgrades, sticky pools..., and a connection opening with the h2c preface, which the HTTP/2 engine then takes).",
		}, []string{"to"}),
	}
	m.mirrored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_l7_mirrored_total",
		Help: "Request copies for a route's shadow pool, by route and outcome: sent (answered), skipped (body not whole or over max_body, too many copies in flight, no shadow backend), failed (the shadow backend did not answer).",
	}, []string{"route", "outcome"})
	m.shedGlobal = m.shed.WithLabelValues("global")
	m.reg.MustRegister(m.requests, m.duration, m.retries, m.shed, m.limited, m.ejections, m.healthy,
		m.inFlight, m.refused, m.reloads, m.handoffs, m.mirrored, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
