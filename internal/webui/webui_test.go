package webui

import (
	"context"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// stopRegistries are real client_golang registries with the series the stops export, served
// over HTTP as each stop serves them.
type stopRegistries struct {
	dnsQ, dnsP, l7Req, l4VIP, l4Drop, l4BE, app *prometheus.CounterVec
	l4Guard                                     *prometheus.CounterVec
	edgeHits, edgeMiss, edgeStale               prometheus.Counter
	l4Flows                                     *prometheus.GaugeVec
	l7Dur                                       *prometheus.HistogramVec
}

func serveRegistries(t *testing.T) (*stopRegistries, []Target) {
	s := &stopRegistries{
		dnsQ:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_dns_queries_total"}, []string{"name", "qtype", "rcode"}),
		dnsP:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_dns_policy_decisions_total"}, []string{"name", "policy", "reason", "site"}),
		edgeHits:  prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_edge_hits_total"}),
		edgeMiss:  prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_edge_misses_total"}),
		edgeStale: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_edge_stale_served_total"}),
		l4VIP:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_l4_vip_packets_total"}, []string{"vip"}),
		l4Drop:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_l4_vip_dropped_packets_total"}, []string{"vip"}),
		l4BE:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_l4_backend_packets_total"}, []string{"backend"}),
		l4Flows:   prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_l4_vip_active_flows"}, []string{"vip"}),
		l4Guard:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_l4_guard_drops_total"}, []string{"reason"}),
		l7Req:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_l7_requests_total"}, []string{"route", "pool", "backend", "code"}),
		l7Dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "switchyard_l7_request_duration_seconds",
			Buckets: []float64{.001, .01, .1, 1}}, []string{"route", "pool"}),
		app: prometheus.NewCounterVec(prometheus.CounterOpts{Name: AppRequestsMetric}, []string{"server"}),
	}
	serve := func(stop, name string, cs ...prometheus.Collector) Target {
		r := prometheus.NewRegistry()
		r.MustRegister(cs...)
		srv := httptest.NewServer(promhttp.HandlerFor(r, promhttp.HandlerOpts{}))
		t.Cleanup(srv.Close)
		return Target{Stop: stop, Name: name, URL: srv.URL + "/metrics"}
	}
	return s, []Target{
		serve(StopDNS, "dns", s.dnsQ, s.dnsP),
		serve(StopEdge, "edge", s.edgeHits, s.edgeMiss, s.edgeStale),
		serve(StopL4, "lb1", s.l4VIP, s.l4Drop, s.l4BE, s.l4Flows, s.l4Guard),
		serve(StopL7, "l7a", s.l7Req, s.l7Dur),
		serve(StopApp, "be1", s.app),
	}
}

// TestFrameRates: two scrapes a known interval apart give the increases per second, the edge's
// hit ratio, the L7 p99 from the histogram's buckets, and the policy split.
func TestFrameRates(t *testing.T) {
	s, targets := serveRegistries(t)
	c := NewCollector(append(targets, Target{Stop: StopL7, Name: "gone", URL: "http://127.0.0.1:1/metrics"}),
		Options{Names: map[string]string{"10.0.0.1": "be1"}})
	s.dnsQ.WithLabelValues("lab.test.", "A", "NOERROR").Add(5) // before the first scrape: not a rate
	s.l4Guard.WithLabelValues("deny").Add(0)                   // the series exists at the first scrape
	ctx := context.Background()
	first := c.Tick(ctx)
	if len(first.DNS.ByZone) != 1 || first.DNS.ByZone["lab.test."] != 0 {
		t.Fatalf("first frame has rates: %+v", first.DNS)
	}
	s.dnsQ.WithLabelValues("lab.test.", "A", "NOERROR").Add(30)
	s.dnsQ.WithLabelValues("api.lab.test.", "A", "NOERROR").Add(10)
	s.dnsP.WithLabelValues("api.lab.test.", "weighted", "weight", "a").Add(10)
	s.edgeHits.Add(30)
	s.edgeMiss.Add(10)
	s.l4VIP.WithLabelValues("web").Add(200)
	s.l4Drop.WithLabelValues("web").Add(2)
	s.l4BE.WithLabelValues("10.0.0.1").Add(100)
	s.l4Flows.WithLabelValues("web").Set(7)
	s.l4Guard.WithLabelValues("deny").Add(60)
	for i := 0; i < 100; i++ {
		s.l7Req.WithLabelValues("all", "app", "b", "200").Inc()
		d := 0.005 // 99 in (0.001, 0.01]
		if i == 99 {
			d = 0.5
		}
		s.l7Dur.WithLabelValues("all", "app").Observe(d)
	}
	s.app.WithLabelValues("be1").Add(40)
	c.agg.prevT = time.Now().Add(-2 * time.Second) // the interval is 2 s
	f := c.Tick(ctx)
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > want*0.02+1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("dns lab.test. rate", f.DNS.ByZone["lab.test."], 15)
	near("dns weighted", f.DNS.ByPolicy["weighted"], 5)
	near("dns static", f.DNS.ByPolicy["static"], 15)
	near("edge hits", f.Edge.Hits, 15)
	near("edge ratio", f.Edge.Ratio, 0.75)
	near("vip packets", f.L4.VIPs["web"].Packets, 100)
	near("vip drops", f.L4.VIPs["web"].Drops, 1)
	near("vip flows", f.L4.VIPs["web"].Flows, 7)
	near("guard deny drops", f.L4.GuardDrops["deny"], 30)
	near("backend packets", f.L4.Backends["be1 10.0.0.1"].Packets, 50)
	near("l7 rps", f.L7["app"].RPS, 50)
	// rank 99 of 100 falls at the top of (0.001, 0.01].
	near("l7 p99", f.L7["app"].P99, 0.01)
	near("app be1", f.App["be1"], 20)
	if n := len(f.Targets); n != 6 || f.Targets[5].Up || f.Targets[5].Error == "" || !f.Targets[0].Up {
		t.Errorf("target status: %+v", f.Targets)
	}
}

// TestQuantile checks the interpolation against histogram_quantile's rules.
func TestQuantile(t *testing.T) {
	for _, c := range []struct {
		b    l7Buckets
		q    float64
		want float64
	}{
		{l7Buckets{0.1: 50, 0.2: 100, math.Inf(1): 100}, 0.5, 0.1},
		{l7Buckets{0.1: 0, 0.2: 100, math.Inf(1): 100}, 0.5, 0.15},
		{l7Buckets{0.1: 0, 0.2: 0, math.Inf(1): 10}, 0.99, 0.2},
		{l7Buckets{0.1: 0, math.Inf(1): 0}, 0.99, -1},
	} {
		if got := quantile(c.q, c.b); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("quantile(%v, %v) = %v, want %v", c.q, c.b, got, c.want)
		}
	}
}
