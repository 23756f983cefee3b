package edge

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// X-Cache labels: what the edge did for a response.
const (
	// Hit means a fresh stored response answered.
	Hit = "HIT"
	// Miss means the response came from upstream (and was stored when cacheable).
	Miss = "MISS"
	// Stale means a stored response past its freshness answered (max-stale,
	// stale-while-revalidate, stale-if-error, grace, soft purge).
	Stale = "STALE"
	// Revalidated means a stored response answered after upstream confirmed it with a 304.
	Revalidated = "REVALIDATED"
	// Bypass means the request went to upstream without the cache (unsafe method, uncacheable URL).
	Bypass = "BYPASS"
)

// Stats are the edge's counters. They feed both /stats and the Prometheus metrics.
type Stats struct {
	// Hits, Misses, StaleServed, Revalidated and Bypassed count responses by X-Cache label.
	Hits, Misses, StaleServed, Revalidated, Bypassed atomic.Int64
	// Collapsed counts requests that waited on another request's upstream fetch.
	Collapsed atomic.Int64
	// OriginRequests and OriginBytes count upstream fetches and the body bytes they brought.
	OriginRequests, OriginBytes atomic.Int64
	// Revalidations counts conditional upstream requests; NotModified those answered 304.
	Revalidations, NotModified atomic.Int64
	// MemoryEvictions and DiskEvictions count entries evicted for lack of room.
	MemoryEvictions, DiskEvictions atomic.Int64
	// Purged counts entries removed or marked stale by purges; Pushed counts pushed URLs stored.
	Purged, Pushed atomic.Int64
	// Compressed counts coded variants made from stored responses (compress.go).
	Compressed atomic.Int64
	// PushForwarded and PushForwardErrors count pushed objects sent on to admin.push_to peers,
	// and the forwards that failed.
	PushForwarded, PushForwardErrors atomic.Int64
	// TierFallbacks counts fetches that went to the origin because the upper tier failed.
	TierFallbacks atomic.Int64
	// Unavailable counts 503s for stored bodies unreadable for a local reason (EMFILE, ...);
	// ConnsRefused counts client connections refused over max_connections.
	Unavailable, ConnsRefused atomic.Int64
	// FastPath counts the hits answered on the HTTP/1.1 fast path (also counted in Hits).
	FastPath atomic.Int64
	// Lent counts requests the fast path had net/http answer alone, keeping the connection.
	Lent atomic.Int64
	// FastMiss counts requests the fast path answered through the cache's full path on its own
	// connection (misses, revalidations, stale entries, ranges...; edge/fastpath/fastmiss.go).
	FastMiss atomic.Int64
	// StaleMidBody counts stale entries served because the origin's replacement broke off after
	// its response head (edge/cache.go holdForStale).
	StaleMidBody atomic.Int64
	// SliceFetches counts slices fetched from upstream (edge/slice.go), SliceHits slices read
	// from storage, SliceChanged objects invalidated because a slice's validator or length
	// differed from the others'.
	SliceFetches, SliceHits, SliceChanged atomic.Int64
	// PartialFetches counts partial fills (a client's range forwarded, or the part a partial
	// entry lacks; edge/partial.go), PartialHits ranges answered from a partial entry.
	PartialFetches, PartialHits atomic.Int64
}

// count records one response with the given X-Cache label.
func (s *Stats) count(label string) {
	switch label {
	case Hit:
		s.Hits.Add(1)
	case Miss:
		s.Misses.Add(1)
	case Stale:
		s.StaleServed.Add(1)
	case Revalidated:
		s.Revalidated.Add(1)
	case Bypass:
		s.Bypassed.Add(1)
	}
}

// HitRatio is the share of cacheable requests answered without waiting for upstream:
// (HIT + STALE) / (HIT + STALE + MISS + REVALIDATED). Bypassed requests are not counted.
func (s *Stats) HitRatio() float64 {
	served := float64(s.Hits.Load() + s.StaleServed.Load())
	all := served + float64(s.Misses.Load()+s.Revalidated.Load())
	if all == 0 {
		return 0
	}
	return served / all
}

// Snapshot returns the counters as a flat map for the stats API.
func (s *Stats) Snapshot() map[string]float64 {
	return map[string]float64{
		"hits": float64(s.Hits.Load()), "misses": float64(s.Misses.Load()),
		"stale": float64(s.StaleServed.Load()), "revalidated": float64(s.Revalidated.Load()),
		"bypass": float64(s.Bypassed.Load()), "collapsed": float64(s.Collapsed.Load()),
		"origin_requests": float64(s.OriginRequests.Load()), "origin_bytes": float64(s.OriginBytes.Load()),
		"revalidations": float64(s.Revalidations.Load()), "not_modified": float64(s.NotModified.Load()),
		"memory_evictions": float64(s.MemoryEvictions.Load()), "disk_evictions": float64(s.DiskEvictions.Load()),
		"purged": float64(s.Purged.Load()), "pushed": float64(s.Pushed.Load()), "compressed": float64(s.Compressed.Load()),
		"tier_fallbacks": float64(s.TierFallbacks.Load()), "hit_ratio": s.HitRatio(),
		"fast_path_hits":      float64(s.FastPath.Load()),
		"fast_path_lent":      float64(s.Lent.Load()),
		"fast_path_misses":    float64(s.FastMiss.Load()),
		"stale_mid_body":      float64(s.StaleMidBody.Load()),
		"slice_fetches":       float64(s.SliceFetches.Load()),
		"slice_hits":          float64(s.SliceHits.Load()),
		"slice_changed":       float64(s.SliceChanged.Load()),
		"partial_fetches":     float64(s.PartialFetches.Load()),
		"partial_hits":        float64(s.PartialHits.Load()),
		"storage_unavailable": float64(s.Unavailable.Load()), "connections_refused": float64(s.ConnsRefused.Load()),
	}
}

// newRegistry exposes the stats as switchyard_edge_* metrics on a registry of the edge's own, so
// several edges can live in one process (the lab, the tests).
func newRegistry(e *Edge) *prometheus.Registry {
	r := prometheus.NewRegistry()
	s := &e.stats
	counter := func(name, help string, v *atomic.Int64, labels prometheus.Labels) {
		r.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "switchyard_edge_" + name, Help: help, ConstLabels: labels,
		}, func() float64 { return float64(v.Load()) }))
	}
	counter("hits_total", "Responses served fresh from the cache (X-Cache: HIT).", &s.Hits, nil)
	counter("misses_total", "Responses fetched from upstream (X-Cache: MISS).", &s.Misses, nil)
	counter("stale_served_total", "Stale responses served (X-Cache: STALE).", &s.StaleServed, nil)
	counter("stale_mid_body_total", "Stale responses served because the origin's replacement broke off after its response head.", &s.StaleMidBody, nil)
	counter("revalidated_total", "Responses served after a 304 from upstream (X-Cache: REVALIDATED).", &s.Revalidated, nil)
	counter("bypass_total", "Requests passed to upstream without the cache (X-Cache: BYPASS).", &s.Bypassed, nil)
	counter("revalidations_total", "Conditional requests sent upstream to validate a stored response.", &s.Revalidations, nil)
	counter("collapsed_requests_total", "Requests that waited on another request's upstream fetch instead of making their own.", &s.Collapsed, nil)
	counter("origin_requests_total", "Requests sent upstream (origin or upper tier).", &s.OriginRequests, nil)
	counter("origin_bytes_total", "Body bytes received from upstream.", &s.OriginBytes, nil)
	counter("compressed_total", "Coded variants (gzip, br, zstd) made from stored responses: each coding of an object once.", &s.Compressed, nil)
	counter("evictions_total", "Entries evicted for lack of room.", &s.MemoryEvictions, prometheus.Labels{"tier": "memory"})
	counter("evictions_total", "Entries evicted for lack of room.", &s.DiskEvictions, prometheus.Labels{"tier": "disk"})
	counter("purged_total", "Entries removed or marked stale by purges.", &s.Purged, nil)
	counter("pushed_total", "URLs stored by push (prewarm).", &s.Pushed, nil)
	counter("push_forwarded_total", "Pushed objects forwarded to admin.push_to peers.", &s.PushForwarded, nil)
	counter("push_forward_errors_total", "Forwards of pushed objects to admin.push_to peers that failed.", &s.PushForwardErrors, nil)
	counter("tier_fallbacks_total", "Fetches sent to the origin directly because the upper tier failed.", &s.TierFallbacks, nil)
	counter("storage_unavailable_total", "503s answered because a stored body could not be read for a local reason (descriptors, memory, disk errors); the entry is kept.", &s.Unavailable, nil)
	counter("connections_refused_total", "Client connections refused with 503 over max_connections.", &s.ConnsRefused, nil)
	counter("fast_path_hits_total", "Hits answered on the HTTP/1.1 fast path (a subset of hits_total).", &s.FastPath, nil)
	counter("fast_path_lent_total", "Requests the fast path had net/http answer alone before taking the connection back.", &s.Lent, nil)
	counter("fast_path_misses_total", "Requests other than fresh memory hits (misses, revalidations, stale, ranges) the fast path answered on its own connection.", &s.FastMiss, nil)
	counter("slice_fetches_total", "Slices of sliced objects fetched from upstream with a Range request.", &s.SliceFetches, nil)
	counter("slice_hits_total", "Slices of sliced objects read from storage.", &s.SliceHits, nil)
	counter("partial_fetches_total", "Ranges asked of upstream for partial entries: a client's range, or the part a partial entry lacks.", &s.PartialFetches, nil)
	counter("partial_hits_total", "Ranges answered from a partial entry.", &s.PartialHits, nil)
	counter("slice_changed_total", "Sliced objects invalidated because a slice's validator or length differed from the others'.", &s.SliceChanged, nil)
	r.MustRegister(newTierCollector(e)) // switchyard_edge_tier_*, edge/tierstats.go
	r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_edge_hit_ratio",
		Help: "(HIT+STALE)/(HIT+STALE+MISS+REVALIDATED) since start.",
	}, s.HitRatio))
	r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "switchyard_edge_objects", Help: "Entries stored.",
	}, func() float64 { return float64(e.store.Len()) }))
	for _, tier := range []string{"memory", "disk"} {
		r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "switchyard_edge_stored_bytes", Help: "Weighted bytes held by each tier.",
			ConstLabels: prometheus.Labels{"tier": tier},
		}, func() float64 {
			m, d := e.store.Bytes()
			if tier == "memory" {
				return float64(m)
			}
			return float64(d)
		}))
	}
	return r
}
