package webui

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Frame is what the page shows at one moment: per-second rates over the last interval (the
// first frame after a target appears has no rates for it) and the current gauges.
type Frame struct {
	Seq  uint64 `json:"seq"`
	Time int64  `json:"t"` // unix milliseconds
	// DNS answers per second by zone (the queries_total name label: a zone origin or a dynamic
	// name) and by policy (the dynamic names' policies; "static" for answers from zone data).
	DNS struct {
		ByZone   map[string]float64 `json:"by_zone"`
		ByPolicy map[string]float64 `json:"by_policy"`
	} `json:"dns"`
	// Edge: hits, misses and stale per second over every edge, and the hit ratio of the
	// interval ((hit+stale)/(hit+stale+miss+revalidated); -1 when there were no requests).
	Edge struct {
		Hits   float64 `json:"hits"`
		Misses float64 `json:"misses"`
		Stale  float64 `json:"stale"`
		Ratio  float64 `json:"ratio"`
	} `json:"edge"`
	// L4: the XDP balancers, summed over every balancer.
	L4 struct {
		VIPs     map[string]*L4Rates `json:"vips"`
		Backends map[string]*L4Rates `json:"backends"`
		// GuardDrops are the XDP guard's drops per second by reason (deny, source_rate, vip_rate).
		GuardDrops map[string]float64 `json:"guard_drops"`
	} `json:"l4"`
	// L7 pools: requests per second and p99 latency (seconds; -1 without requests).
	L7 map[string]*PoolRates `json:"l7"`
	// App: requests per second answered by each app backend.
	App map[string]float64 `json:"app"`
	// Targets: every scrape target and whether it answered.
	Targets []TargetStatus `json:"targets"`
}

// L4Rates are one VIP's or backend's packets and drops per second and active flows.
type L4Rates struct {
	Packets float64 `json:"packets"`
	Flows   float64 `json:"flows"`
	Drops   float64 `json:"drops"`
}

// PoolRates are one L7 pool's request rate and 99th percentile latency.
type PoolRates struct {
	RPS float64 `json:"rps"`
	P99 float64 `json:"p99"`
}

// TargetStatus is one target's last scrape.
type TargetStatus struct {
	Stop  string `json:"stop"`
	Name  string `json:"name"`
	Up    bool   `json:"up"`
	Error string `json:"error,omitempty"`
}

func (f *Frame) encode() []byte {
	b, _ := json.Marshal(f)
	return b
}

// aggregator keeps the previous value of every counter series, so that each frame has the
// increase over the last interval, per target (a restarted stop's reset counts from zero).
type aggregator struct {
	names map[string]string
	prev  map[string]float64
	prevT time.Time
	// seen are the targets the last scrape reached: a series new on one of them started from
	// zero since (stops create labelled series at their first event).
	seen map[string]bool
}

func newAggregator(names map[string]string) *aggregator {
	return &aggregator{names: names, prev: map[string]float64{}, seen: map[string]bool{}}
}

// sample is one series of a scrape.
type sample struct {
	name   string
	labels map[string]string
	value  float64
	// delta is the counter's increase since the last scrape (0 on the first).
	delta float64
}

// l7Buckets accumulates one pool's histogram bucket increases.
type l7Buckets map[float64]float64

func (a *aggregator) frame(now time.Time, res []scrapeResult) *Frame {
	f := &Frame{Time: now.UnixMilli(), L7: map[string]*PoolRates{}, App: map[string]float64{}}
	f.DNS.ByZone, f.DNS.ByPolicy = map[string]float64{}, map[string]float64{}
	f.L4.VIPs, f.L4.Backends, f.L4.GuardDrops = map[string]*L4Rates{}, map[string]*L4Rates{}, map[string]float64{}
	f.Edge.Ratio = -1
	dt := now.Sub(a.prevT).Seconds()
	if a.prevT.IsZero() || dt <= 0 {
		dt = 0
	}
	a.prevT = now
	next, nextSeen := map[string]float64{}, map[string]bool{}
	var d dnsAcc
	var e edgeAcc
	buckets := map[string]l7Buckets{}
	for _, r := range res {
		ts := TargetStatus{Stop: r.target.Stop, Name: r.target.Name, Up: r.err == nil}
		if r.err != nil {
			ts.Error = r.err.Error()
		}
		f.Targets = append(f.Targets, ts)
		if r.err != nil {
			continue
		}
		for _, s := range a.samples(r, next, nextSeen) {
			switch r.target.Stop {
			case StopDNS:
				d.add(s)
			case StopEdge:
				e.add(s)
			case StopL4:
				a.addL4(f, s)
			case StopL7:
				addL7(f, buckets, s)
			case StopApp:
				if s.name == AppRequestsMetric {
					f.App[r.target.Name] += s.delta
				}
			}
		}
	}
	a.prev, a.seen = next, nextSeen
	perSecond(f, dt, &d, &e, buckets)
	return f
}

// samples flattens a scrape into counters and gauges (histograms as their _bucket series),
// with each counter's increase since the last scrape.
func (a *aggregator) samples(r scrapeResult, next map[string]float64, nextSeen map[string]bool) []sample {
	var out []sample
	tkey := r.target.Stop + "\x00" + r.target.Name
	known := a.seen[tkey]
	nextSeen[tkey] = true
	add := func(name string, m *dto.Metric, extra map[string]string, v float64, counter bool) {
		s := sample{name: name, labels: map[string]string{}, value: v}
		for _, l := range m.GetLabel() {
			s.labels[l.GetName()] = l.GetValue()
		}
		for k, x := range extra {
			s.labels[k] = x
		}
		if counter {
			key := seriesKey(r.target, name, s.labels)
			next[key] = v
			if p, ok := a.prev[key]; ok {
				s.delta = v - p
				if s.delta < 0 { // the stop restarted
					s.delta = v
				}
			} else if known {
				s.delta = v
			}
		}
		out = append(out, s)
	}
	for name, mf := range r.families {
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				add(name, m, nil, m.GetCounter().GetValue(), true)
			case dto.MetricType_GAUGE:
				add(name, m, nil, m.GetGauge().GetValue(), false)
			case dto.MetricType_HISTOGRAM:
				for _, b := range m.GetHistogram().GetBucket() {
					le := strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64)
					add(name+"_bucket", m, map[string]string{"le": le}, float64(b.GetCumulativeCount()), true)
				}
				add(name+"_count", m, nil, float64(m.GetHistogram().GetSampleCount()), true)
			case dto.MetricType_UNTYPED:
				add(name, m, nil, m.GetUntyped().GetValue(), strings.HasSuffix(name, "_total"))
			}
		}
	}
	return out
}

func seriesKey(t Target, name string, labels map[string]string) string {
	var b strings.Builder
	b.WriteString(t.Stop + "\x00" + t.Name + "\x00" + name)
	for _, k := range sortedKeys(labels) {
		b.WriteString("\x00" + k + "=" + labels[k])
	}
	return b.String()
}

type dnsAcc struct {
	byZone, byPolicy map[string]float64
	answers, dynamic float64
	seen             bool
}

func (d *dnsAcc) add(s sample) {
	if d.byZone == nil {
		d.byZone, d.byPolicy, d.seen = map[string]float64{}, map[string]float64{}, true
	}
	switch s.name {
	case "switchyard_dns_queries_total":
		d.byZone[s.labels["name"]] += s.delta
		d.answers += s.delta
	case "switchyard_dns_policy_decisions_total":
		d.byPolicy[s.labels["policy"]] += s.delta
		d.dynamic += s.delta
	}
}

type edgeAcc struct{ hits, misses, stale, revalidated float64 }

func (e *edgeAcc) add(s sample) {
	switch s.name {
	case "switchyard_edge_hits_total":
		e.hits += s.delta
	case "switchyard_edge_misses_total":
		e.misses += s.delta
	case "switchyard_edge_stale_served_total":
		e.stale += s.delta
	case "switchyard_edge_revalidated_total":
		e.revalidated += s.delta
	}
}

func (a *aggregator) addL4(f *Frame, s sample) {
	get := func(m map[string]*L4Rates, k string) *L4Rates {
		if m[k] == nil {
			m[k] = &L4Rates{}
		}
		return m[k]
	}
	switch s.name {
	case "switchyard_l4_vip_packets_total":
		get(f.L4.VIPs, s.labels["vip"]).Packets += s.delta
	case "switchyard_l4_vip_dropped_packets_total":
		get(f.L4.VIPs, s.labels["vip"]).Drops += s.delta
	case "switchyard_l4_vip_active_flows":
		get(f.L4.VIPs, s.labels["vip"]).Flows += s.value
	case "switchyard_l4_backend_packets_total":
		get(f.L4.Backends, a.backendName(s.labels["backend"])).Packets += s.delta
	case "switchyard_l4_backend_active_flows":
		get(f.L4.Backends, a.backendName(s.labels["backend"])).Flows += s.value
	case "switchyard_l4_guard_drops_total":
		f.L4.GuardDrops[s.labels["reason"]] += s.delta
	}
}

// backendName is "be1 198.18.1.11" when the address has a known host name.
func (a *aggregator) backendName(addr string) string {
	if n, ok := a.names[addr]; ok {
		return n + " " + addr
	}
	return addr
}

func addL7(f *Frame, buckets map[string]l7Buckets, s sample) {
	pool := s.labels["pool"]
	switch s.name {
	case "switchyard_l7_requests_total":
		if f.L7[pool] == nil {
			f.L7[pool] = &PoolRates{P99: -1}
		}
		f.L7[pool].RPS += s.delta
	case "switchyard_l7_request_duration_seconds_bucket":
		le, err := strconv.ParseFloat(s.labels["le"], 64)
		if err != nil {
			return
		}
		if buckets[pool] == nil {
			buckets[pool] = l7Buckets{}
		}
		buckets[pool][le] += s.delta
	}
}

// perSecond divides the interval's increases by its length and works out the ratios and
// quantiles.
func perSecond(f *Frame, dt float64, d *dnsAcc, e *edgeAcc, buckets map[string]l7Buckets) {
	rate := func(x float64) float64 {
		if dt <= 0 {
			return 0
		}
		return x / dt
	}
	for k, v := range d.byZone {
		f.DNS.ByZone[k] = rate(v)
	}
	for k, v := range d.byPolicy {
		f.DNS.ByPolicy[k] = rate(v)
	}
	if d.seen {
		f.DNS.ByPolicy["static"] = rate(math.Max(0, d.answers-d.dynamic))
	}
	f.Edge.Hits, f.Edge.Misses, f.Edge.Stale = rate(e.hits), rate(e.misses), rate(e.stale)
	if all := e.hits + e.stale + e.misses + e.revalidated; all > 0 {
		f.Edge.Ratio = (e.hits + e.stale) / all
	}
	for _, m := range []map[string]*L4Rates{f.L4.VIPs, f.L4.Backends} {
		for _, r := range m {
			r.Packets, r.Drops = rate(r.Packets), rate(r.Drops)
		}
	}
	for k, v := range f.L4.GuardDrops {
		f.L4.GuardDrops[k] = rate(v)
	}
	for pool, p := range f.L7 {
		p.RPS = rate(p.RPS)
		p.P99 = quantile(0.99, buckets[pool])
	}
	for k, v := range f.App {
		f.App[k] = rate(v)
	}
}

// quantile is Prometheus's histogram_quantile over cumulative bucket increases: linear
// interpolation inside the bucket the rank falls in; -1 when there were no observations.
func quantile(q float64, b l7Buckets) float64 {
	les := make([]float64, 0, len(b))
	for le := range b {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 || b[les[len(les)-1]] <= 0 {
		return -1
	}
	total := b[les[len(les)-1]]
	rank := q * total
	lower, prevCount := 0.0, 0.0
	for i, le := range les {
		c := b[le]
		if c >= rank {
			if math.IsInf(le, 1) {
				if i == 0 {
					return -1
				}
				return les[i-1] // Prometheus answers the highest finite bound
			}
			if c == prevCount {
				return le
			}
			return lower + (le-lower)*(rank-prevCount)/(c-prevCount)
		}
		lower, prevCount = le, c
	}
	return les[len(les)-1]
}
