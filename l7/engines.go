package l7

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// engineKind is the engine that served a request: the metric switchyard_l7_engine_requests_total
// counts each, so an operator sees how much traffic takes the net/http fallback, and the engine
// matrix (engines_test.go) proves that each engine it names served its requests itself.
type engineKind uint8

const (
	engineLoop      engineKind = iota // the epoll event loops (HTTP/1.1, TLS after the first request)
	engineGoroutine                   // a goroutine per HTTP/1.1 connection through the request core
	engineH2                          // an HTTP/2 stream through the request core
	engineNetHTTP                     // net/http's ReverseProxy (ServeHTTP): what the core does not serve, HTTP/3
	numEngines
)

var engineNames = [numEngines]string{"loop", "goroutine", "h2", "nethttp"}

// servedCounts counts requests by the engine that served them.
type servedCounts [numEngines]atomic.Int64

// add counts one request served by engine k.
func (c *servedCounts) add(k engineKind) { c[k].Add(1) }

// of returns how many requests engine k served.
func (c *servedCounts) of(k engineKind) int64 { return c[k].Load() }

// core returns how many requests the request core served, on any engine but net/http.
func (c *servedCounts) core() int64 {
	return c.of(engineLoop) + c.of(engineGoroutine) + c.of(engineH2)
}

// collectors are the counters of the metric, read from c when scraped (the request path only
// adds to an atomic).
func (c *servedCounts) collectors() []prometheus.Collector {
	out := make([]prometheus.Collector, 0, numEngines)
	for k := range numEngines {
		out = append(out, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "switchyard_l7_engine_requests_total",
			Help:        "Requests served, by engine: loop (event loops), goroutine, h2 (HTTP/2 streams through the request core), nethttp (net/http's reverse proxy: what the core does not serve, and HTTP/3).",
			ConstLabels: prometheus.Labels{"engine": engineNames[k]},
		}, func() float64 { return float64(c.of(k)) }))
	}
	return out
}
