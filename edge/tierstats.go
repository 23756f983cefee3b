package edge

import (
	"io"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Roles an edge plays for a request: lower (a client asked it) or upper (a lower tier did).
const (
	roleLower = 0
	roleUpper = 1
)

var roleNames = [2]string{"lower", "upper"}

// tierCounters are the tiered-cache analytics of one origin at one edge, by role.
type tierCounters struct {
	// Requests, Hits and BytesServed count GET/HEAD answers, cache hits (HIT or STALE) and the
	// body bytes sent, by role.
	Requests, Hits, BytesServed [2]atomic.Int64
	// OriginRequests and OriginBytes count fetches sent to the origin directly and the body
	// bytes they brought, by role.
	OriginRequests, OriginBytes [2]atomic.Int64
	// TierRequests counts fetches sent to an upper tier, TierBytes the body bytes they brought;
	// Saved those the upper tier answered from its cache (origin requests it saved); Fallbacks
	// the tier attempts that failed and went on to the next tier or the origin.
	TierRequests, TierBytes, Saved, Fallbacks atomic.Int64
}

// TierStatus describes one upper tier of one origin, for stats and tests.
type TierStatus struct {
	// URL is the tier's base URL.
	URL string `json:"url"`
	// ScoreMS is edge-to-tier plus tier-to-origin latency (smart) or edge-to-tier latency
	// (generic, custom), -1 when the last probe failed, 0 before the first.
	ScoreMS float64 `json:"score_ms"`
	// OriginMS is the tier's own latency to the origin (smart topology).
	OriginMS float64 `json:"origin_ms,omitempty"`
	// EdgeMS is this edge's latency to the tier.
	EdgeMS float64 `json:"edge_ms,omitempty"`
	// Selected is true for the smart topology's primary (or the first tier of the others).
	Selected bool `json:"selected"`
	// Rank is "primary" or "fallback" in the smart topology, "" otherwise.
	Rank string `json:"rank,omitempty"`
	// Down is true while the tier is skipped after a failed request.
	Down bool `json:"down,omitempty"`
}

// RoleStats are one origin's counters in one role.
type RoleStats struct {
	// Requests, Hits and BytesServed: GET/HEAD answers, hits (HIT or STALE), body bytes sent.
	Requests int64 `json:"requests"`
	Hits     int64 `json:"hits"`
	// BytesServed is the body bytes sent for these requests.
	BytesServed int64 `json:"bytes_served"`
	// OriginRequests and OriginBytes: fetches sent to the origin directly and their body bytes.
	OriginRequests int64 `json:"origin_requests"`
	OriginBytes    int64 `json:"origin_bytes"`
}

// OriginStats is the tiered-cache analytics of one origin at this edge.
type OriginStats struct {
	// Origin names the origin: its first host, or "default" for the top-level origin.
	Origin string `json:"origin"`
	// URL is the origin's base URL; Topology its tier topology.
	URL      string `json:"url"`
	Topology string `json:"topology"`
	// Primary and Secondary are the upper tiers misses try first and second now ("" if none).
	Primary   string `json:"primary,omitempty"`
	Secondary string `json:"secondary,omitempty"`
	// Lower are the counters of client requests, Upper those of requests from lower tiers.
	Lower RoleStats `json:"lower"`
	Upper RoleStats `json:"upper"`
	// TierRequests, TierBytes: fetches sent to upper tiers and their body bytes; UpperHits (the
	// origin requests the upper tier saved): those answered from the upper tier's cache;
	// Fallbacks: tier attempts that failed over to the next tier or the origin.
	TierRequests int64 `json:"tier_requests"`
	TierBytes    int64 `json:"tier_bytes"`
	UpperHits    int64 `json:"upper_hits"`
	Fallbacks    int64 `json:"fallbacks"`
	// Tiers are the origin's upper tiers and their measurements.
	Tiers []TierStatus `json:"tiers,omitempty"`
}

// status reports the route's tiers.
func (rt *route) status(now time.Time) []TierStatus {
	var ranked []*tier
	if p := rt.ranked.Load(); p != nil {
		ranked = *p
	}
	var out []TierStatus
	for i, t := range rt.tiers {
		self, orig := t.selfNS.Load(), t.originNS.Load()
		s := TierStatus{URL: t.base.String(), EdgeMS: ms(self), OriginMS: ms(orig),
			Down: t.downUntil.Load() > now.UnixNano()}
		switch {
		case self < 0 || (rt.topology == TopologySmart && orig < 0):
			s.ScoreMS = -1
		case rt.topology == TopologySmart:
			s.ScoreMS = ms(self + orig)
		default:
			s.ScoreMS = ms(self)
		}
		switch j := slices.Index(ranked, t); {
		case j == 0:
			s.Rank, s.Selected = "primary", true
		case j == 1:
			s.Rank = "fallback"
		}
		if rt.topology == TopologyCustom && i == 0 {
			s.Selected = true
		}
		out = append(out, s)
	}
	return out
}

func ms(ns int64) float64 {
	if ns <= 0 {
		return float64(ns) // 0 unmeasured, -1 failed
	}
	return float64(ns) / 1e6
}

// stats reports the route's analytics.
func (rt *route) stats(now time.Time) OriginStats {
	c := &rt.counters
	role := func(i int) RoleStats {
		return RoleStats{Requests: c.Requests[i].Load(), Hits: c.Hits[i].Load(), BytesServed: c.BytesServed[i].Load(),
			OriginRequests: c.OriginRequests[i].Load(), OriginBytes: c.OriginBytes[i].Load()}
	}
	o := OriginStats{Origin: rt.name, URL: rt.origin.String(), Topology: rt.topology,
		Lower: role(roleLower), Upper: role(roleUpper),
		TierRequests: c.TierRequests.Load(), TierBytes: c.TierBytes.Load(), UpperHits: c.Saved.Load(),
		Fallbacks: c.Fallbacks.Load(), Tiers: rt.status(now)}
	var first []*tier
	switch rt.topology {
	case TopologySmart:
		if p := rt.ranked.Load(); p != nil {
			first = *p
		}
	case TopologyCustom:
		first = rt.tiers
	}
	if len(first) > 0 {
		o.Primary = first[0].base.String()
	}
	if len(first) > 1 {
		o.Secondary = first[1].base.String()
	}
	return o
}

// Tiers reports the top-level origin's tiers (or the first origin's when there is no top-level
// origin).
func (e *Edge) Tiers() []TierStatus {
	if len(e.upstream.routes) == 0 {
		return nil
	}
	return e.upstream.routes[0].status(time.Now())
}

// OriginStats returns the tiered-cache analytics of every origin, the top-level one first.
func (e *Edge) OriginStats() []OriginStats {
	now := time.Now()
	out := make([]OriginStats, 0, len(e.upstream.routes))
	for _, rt := range e.upstream.routes {
		out = append(out, rt.stats(now))
	}
	return out
}

// servedFast counts a fast-path hit; with a single origin it needs no host lookup.
func (e *Edge) servedFast(host []byte, fromTier, head bool, size int64) {
	if head {
		size = 0
	}
	rt := e.upstream.def
	if len(e.upstream.byHost) > 0 {
		rt = e.upstream.routeFor(string(host))
	}
	rt.count(fromTier, Hit, size)
}

// served counts one GET/HEAD answer in its origin's analytics.
func (e *Edge) served(host string, fromTier bool, label string, bytes int64) {
	e.upstream.routeFor(host).count(fromTier, label, bytes)
}

// count adds one answer to the route's counters (nil: no origin for the host, not counted).
func (rt *route) count(fromTier bool, label string, bytes int64) {
	if rt == nil {
		return
	}
	role := roleLower
	if fromTier {
		role = roleUpper
	}
	c := &rt.counters
	c.Requests[role].Add(1)
	if label == Hit || label == Stale {
		c.Hits[role].Add(1)
	}
	c.BytesServed[role].Add(bytes)
}

// countingWriter counts the body bytes written through it and keeps http.Flusher working.
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	k, err := w.ResponseWriter.Write(p)
	w.n += int64(k)
	return k, err
}

// ReadFrom keeps the underlying writer's io.ReaderFrom (net/http's sendfile for disk bodies)
// in use.
func (w *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	n, err := io.Copy(w.ResponseWriter, r)
	w.n += n
	return n, err
}

// Flush passes a flush on (streamed misses flush as the body arrives).
func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveCounted answers a GET or HEAD and counts it in its origin's tiered-cache analytics.
func (e *Edge) serveCounted(w http.ResponseWriter, r *http.Request) {
	cw := &countingWriter{ResponseWriter: w}
	e.serveCacheable(cw, r)
	e.served(r.Host, r.Header.Get(TierHeader) != "", w.Header().Get("X-Cache"), cw.n)
}

// tierCollector exports the analytics as switchyard_edge_tier_* metrics.
type tierCollector struct {
	e                                                             *Edge
	requests, hits, served, originReq, originBytes                *prometheus.Desc
	tierReq, tierBytes, saved, fallbacks, selected, originLatency *prometheus.Desc
}

func newTierCollector(e *Edge) *tierCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("switchyard_edge_tier_"+name, help, labels, nil)
	}
	return &tierCollector{e: e,
		requests:      d("requests_total", "GET/HEAD requests answered, by origin and role (lower: from clients, upper: from lower tiers).", "origin", "role"),
		hits:          d("hits_total", "Requests answered from this edge's cache (HIT or STALE), by origin and role.", "origin", "role"),
		served:        d("served_bytes_total", "Body bytes sent for GET/HEAD requests, by origin and role.", "origin", "role"),
		originReq:     d("origin_requests_total", "Fetches sent to the origin directly, by origin and role.", "origin", "role"),
		originBytes:   d("origin_bytes_total", "Body bytes received from the origin directly, by origin and role.", "origin", "role"),
		tierReq:       d("upper_requests_total", "Fetches sent to an upper tier, by origin.", "origin"),
		tierBytes:     d("upper_bytes_total", "Body bytes received from upper tiers, by origin.", "origin"),
		saved:         d("saved_origin_requests_total", "Fetches the upper tier answered from its cache (origin requests it saved), by origin.", "origin"),
		fallbacks:     d("origin_fallbacks_total", "Upper-tier attempts that failed and went on to the next tier or the origin, by origin.", "origin"),
		selected:      d("selected", "1 for the upper tier each origin's misses try first (rank primary) and second (rank fallback).", "origin", "tier", "rank"),
		originLatency: d("origin_latency_seconds", "An upper tier's last reported latency to the origin (smart topology).", "origin", "tier"),
	}
}

// Describe sends the descriptors.
func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.hits, c.served, c.originReq, c.originBytes,
		c.tierReq, c.tierBytes, c.saved, c.fallbacks, c.selected, c.originLatency} {
		ch <- d
	}
}

// Collect sends every origin's current figures.
func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, o := range c.e.OriginStats() {
		for i, r := range []RoleStats{o.Lower, o.Upper} {
			role := roleNames[i]
			counter(c.requests, r.Requests, o.Origin, role)
			counter(c.hits, r.Hits, o.Origin, role)
			counter(c.served, r.BytesServed, o.Origin, role)
			counter(c.originReq, r.OriginRequests, o.Origin, role)
			counter(c.originBytes, r.OriginBytes, o.Origin, role)
		}
		counter(c.tierReq, o.TierRequests, o.Origin)
		counter(c.tierBytes, o.TierBytes, o.Origin)
		counter(c.saved, o.UpperHits, o.Origin)
		counter(c.fallbacks, o.Fallbacks, o.Origin)
		for _, t := range o.Tiers {
			if t.Rank != "" {
				ch <- prometheus.MustNewConstMetric(c.selected, prometheus.GaugeValue, 1, o.Origin, t.URL, t.Rank)
			}
			if t.OriginMS > 0 {
				ch <- prometheus.MustNewConstMetric(c.originLatency, prometheus.GaugeValue, t.OriginMS/1e3, o.Origin, t.URL)
			}
		}
	}
}
