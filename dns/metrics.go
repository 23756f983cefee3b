package dns

import (
	"fmt"
	"net/netip"
	"strings"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the switchyard_dns_* series of one server.
type metrics struct {
	queries     *prometheus.CounterVec
	decisions   *prometheus.CounterVec
	siteUp      *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	reloads     *prometheus.CounterVec
	truncated   prometheus.Counter
	rateLimited *prometheus.CounterVec
}

func newMetrics(r *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dns_queries_total",
			Help: "Queries answered, by name (dynamic name, zone origin or * for every zone past query_metrics_zones, or - when outside every zone), query type and rcode.",
		}, []string{"name", "qtype", "rcode"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dns_policy_decisions_total",
			Help: "Routing policy decisions for dynamic names, by name, policy, reason and first site answered.",
		}, []string{"name", "policy", "reason", "site"}),
		siteUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "switchyard_dns_site_up",
			Help: "Health state of each site of a dynamic name (1 up, 0 down).",
		}, []string{"name", "site"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dns_site_transitions_total",
			Help: "Health state changes of sites, by the state entered.",
		}, []string{"name", "site", "state"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dns_reloads_total",
			Help: "Configuration reloads by result (ok, error: the old zones were kept).",
		}, []string{"result"}),
		truncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "switchyard_dns_truncated_total",
			Help: "UDP responses truncated (TC=1) because the answer exceeded the client's buffer size.",
		}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_dns_rate_limited_total",
			Help: "Queries hit by response-rate limiting, by action (drop, slip).",
		}, []string{"action"}),
	}
	for _, c := range []prometheus.Collector{m.queries, m.decisions, m.siteUp, m.transitions, m.reloads,
		m.truncated, m.rateLimited} {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("register dns metrics: %w", err)
		}
	}
	return m, nil
}

// knownTypes bounds the qtype label: anything else is "other", so random query types cannot
// blow up the series count.
var knownTypes = map[uint16]bool{mdns.TypeA: true, mdns.TypeAAAA: true, mdns.TypeCNAME: true,
	mdns.TypeSOA: true, mdns.TypeNS: true, mdns.TypeTXT: true, mdns.TypeMX: true, mdns.TypeSRV: true,
	mdns.TypeCAA: true, mdns.TypeANY: true, mdns.TypePTR: true, mdns.TypeDS: true, mdns.TypeHTTPS: true}

// queryCounter returns the queries_total series of an outcome: by zone while the zones are
// few enough (query_metrics_zones), else a static zone's queries under name "*".
func (s *Server) queryCounter(oc *outcome) prometheus.Counter {
	qt := "other"
	if knownTypes[oc.qtype] {
		qt = mdns.TypeToString[oc.qtype]
	}
	name := oc.name
	if st := s.state.Load(); !st.zoneSeries && name != "-" && st.names[name] == nil {
		name = "*"
	}
	return s.metrics.queries.WithLabelValues(name, qt, mdns.RcodeToString[oc.rcode])
}

// decisionCounter returns the policy_decisions_total series of an outcome, nil for static ones.
func (s *Server) decisionCounter(oc *outcome) prometheus.Counter {
	if oc.reason == "" {
		return nil
	}
	pol := ""
	if n := s.state.Load().names[oc.name]; n != nil {
		pol = n.Policy
	}
	site := oc.sites
	if i := strings.IndexByte(site, ','); i >= 0 {
		site = site[:i]
	}
	return s.metrics.decisions.WithLabelValues(oc.name, pol, oc.reason, site)
}

func (s *Server) observe(oc *outcome, src netip.Addr) {
	s.queryCounter(oc).Inc()
	rc := mdns.RcodeToString[oc.rcode]
	if c := s.decisionCounter(oc); c != nil {
		c.Inc()
	}
	if oc.trunc {
		s.metrics.truncated.Inc()
	}
	if s.state.Load().cfg.QueryLog {
		s.log.Info("dns query", "client", src.String(), "qname", oc.qname, "qtype", mdns.TypeToString[oc.qtype],
			"rcode", rc, "decision", oc.reason, "sites", oc.sites, "truncated", oc.trunc)
	}
}
