package dns

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// opsMetrics are the server's operational series beside the query metrics: local faults and
// zone transfers.
type opsMetrics struct {
	acceptErrors prometheus.Counter
	transfers    *prometheus.CounterVec
	notifies     *prometheus.CounterVec
	updates      *prometheus.CounterVec
}

func newOpsMetrics(r *prometheus.Registry, s *Server) (*opsMetrics, error) {
	m := &opsMetrics{
		acceptErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_dns_tcp_accept_errors_total",
			Help: "Failed TCP accepts (out of descriptors and the like); the accept loop backs off after each.",
		}),
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dns_transfers_total",
			Help: "Zone transfer requests, by zone, type (AXFR, IXFR, IXFR-as-AXFR, IXFR-uptodate) and result (ok, refused, notauth, error).",
		}, []string{"zone", "type", "result"}),
		notifies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dns_notifies_total",
			Help: "NOTIFY messages sent to secondaries, by zone, target and result (ok, error).",
		}, []string{"zone", "target", "result"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dns_updates_total",
			Help: "RFC 2136 dynamic updates, by zone (- when none of ours) and result (ok, unchanged, refused, notauth, notzone, formerr, yxdomain, nxdomain, yxrrset, nxrrset, servfail).",
		}, []string{"zone", "result"}),
	}
	local := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "switchyard_dns_health_local_errors_total",
		Help: "Health probes that failed for a local reason (out of descriptors, memory or ports); not counted against the target.",
	}, func() float64 {
		if st := s.state.Load(); st != nil {
			return float64(st.health.LocalErrors())
		}
		return 0
	})
	for _, c := range []prometheus.Collector{m.acceptErrors, m.transfers, m.notifies, m.updates, local, zoneSerials{s}} {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("register dns metrics: %w", err)
		}
	}
	return m, nil
}

// zoneSerials exports each zone's current SOA serial (switchyard_dns_zone_serial), read from the
// state being served at scrape time: updates and reloads change it.
type zoneSerials struct{ s *Server }

var zoneSerialDesc = prometheus.NewDesc("switchyard_dns_zone_serial",
	"The SOA serial each zone is served at (raised by reloads and dynamic updates).", []string{"zone"}, nil)

func (z zoneSerials) Describe(ch chan<- *prometheus.Desc) { ch <- zoneSerialDesc }

func (z zoneSerials) Collect(ch chan<- prometheus.Metric) {
	st := z.s.state.Load()
	if st == nil {
		return
	}
	for _, zn := range st.store.Zones() {
		ch <- prometheus.MustNewConstMetric(zoneSerialDesc, prometheus.GaugeValue, float64(zn.SOA.Serial), zn.Origin)
	}
}
