package dns

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// opsMetrics are the server's operational series beside the query metrics: local faults and
// zone transfers.
type opsMetrics struct {
	acceptErrors prometheus.Counter
	transfers    *prometheus.CounterVec
	notifies     *prometheus.CounterVec
	updates      *prometheus.CounterVec
	transfersIn  *prometheus.CounterVec
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
		transfersIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dns_transfers_in_total",
			Help: "Zone transfers of secondary zones from their primaries, by zone, kind (AXFR, IXFR, IXFR-as-AXFR) and result (ok, error).",
		}, []string{"zone", "kind", "result"}),
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
	for _, c := range []prometheus.Collector{m.acceptErrors, m.transfers, m.notifies, m.updates, m.transfersIn, local, zoneSerials{s}, zoneRoles{s}} {
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

// zoneRoles exports what `switchyard dns status` shows of each zone's role, read at scrape
// time: switchyard_dns_zone_info (role, and for a secondary the primary and kind of its last
// transfer), and for the secondary zones the time of that transfer, of the next SOA check and
// whether the zone expired (switchyard_dns_zone_expired, 1 while it answers SERVFAIL).
type zoneRoles struct{ s *Server }

var (
	zoneInfoDesc = prometheus.NewDesc("switchyard_dns_zone_info",
		"Each zone's role (primary, secondary); for a secondary the primary and the kind of its last transfer in.",
		[]string{"zone", "role", "primary", "kind"}, nil)
	zoneLastTransferDesc = prometheus.NewDesc("switchyard_dns_zone_last_transfer_timestamp_seconds",
		"When the secondary zone was last transferred from a primary (Unix time; 0 never).", []string{"zone"}, nil)
	zoneNextRefreshDesc = prometheus.NewDesc("switchyard_dns_zone_next_refresh_timestamp_seconds",
		"When the secondary zone next asks its primaries for the SOA (Unix time).", []string{"zone"}, nil)
	zoneExpiredDesc = prometheus.NewDesc("switchyard_dns_zone_expired",
		"1 while the secondary zone is not served (expired, or no copy yet): its queries get SERVFAIL.", []string{"zone"}, nil)
)

func (z zoneRoles) Describe(ch chan<- *prometheus.Desc) {
	ch <- zoneInfoDesc
	ch <- zoneLastTransferDesc
	ch <- zoneNextRefreshDesc
	ch <- zoneExpiredDesc
}

func (z zoneRoles) Collect(ch chan<- prometheus.Metric) {
	st := z.s.state.Load()
	if st == nil {
		return
	}
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixNano()) / 1e9
	}
	for i := range st.cfg.Zones {
		origin := st.cfg.Zones[i].Origin
		sz := st.secondaries[origin]
		if sz == nil {
			ch <- prometheus.MustNewConstMetric(zoneInfoDesc, prometheus.GaugeValue, 1, origin, "primary", "", "")
			continue
		}
		stat := sz.Status()
		ch <- prometheus.MustNewConstMetric(zoneInfoDesc, prometheus.GaugeValue, 1, origin, "secondary", stat.From.Primary, stat.From.Kind)
		ch <- prometheus.MustNewConstMetric(zoneLastTransferDesc, prometheus.GaugeValue, unix(stat.From.At), origin)
		ch <- prometheus.MustNewConstMetric(zoneNextRefreshDesc, prometheus.GaugeValue, unix(stat.Next), origin)
		ch <- prometheus.MustNewConstMetric(zoneExpiredDesc, prometheus.GaugeValue, boolFloat(st.down[origin]), origin)
	}
}
