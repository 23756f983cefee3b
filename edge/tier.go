package edge

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/edge/origin"
)

// TierHeader marks a request a lower-tier edge sends to its upper tier. The upper tier fetches
// its own misses from the origin directly (never through a tier of its own, so tiers cannot
// loop) and counts the request in its upper-tier analytics. It is removed before the origin.
const TierHeader = "X-Switchyard-Tier"

// upstream sends the edge's fetches to the origin of the request's host, through that origin's
// upper tier when it has one (edge/route.go), falling back to the next tier and then to the
// origin when a tier fails.
type upstream struct {
	e         *Edge
	transport *http.Transport
	def       *route            // the top-level origin, nil when only origins are configured
	byHost    map[string]*route // origins entries by lower-cased host
	routes    []*route          // every route, default first
	stop      chan struct{}
	stopOnce  sync.Once
	probeDone chan struct{}
}

// tier is one upper-tier edge as seen for one origin, with its last measurements.
type tier struct {
	base *url.URL
	// originNS is the tier's own latency to the origin (as it reports it), selfNS the latency
	// from this edge to the tier; 0 means unmeasured, -1 failed.
	originNS, selfNS atomic.Int64
	// downUntil (unix ns) keeps a tier that failed a request out of the chain until then, or
	// until a probe finds it answering again.
	downUntil atomic.Int64
}

// rankedTiers is the smart topology's current choice: primary, then fallback.
type rankedTiers = atomic.Pointer[[]*tier]

func newUpstream(e *Edge, cfg Config, tierCert *tls.Certificate) (*upstream, error) {
	trust, err := trustOf(cfg, tierCert)
	if err != nil {
		return nil, err
	}
	u := &upstream{
		e:         e,
		transport: origin.NewTransport(trust), // transfer codings Go's client refuses: edge/origin
		stop:      make(chan struct{}),
		probeDone: make(chan struct{}),
	}
	if u.def, u.byHost, u.routes, err = buildRoutes(cfg); err != nil {
		return nil, err
	}
	var probed []*route
	for _, rt := range u.routes {
		if len(rt.tiers) > 0 {
			probed = append(probed, rt)
		}
	}
	if len(probed) == 0 {
		close(u.probeDone)
		return u, nil
	}
	go u.probeLoop(probed)
	return u, nil
}

func (u *upstream) close() {
	u.stopOnce.Do(func() { close(u.stop) })
	<-u.probeDone
	u.transport.CloseIdleConnections()
}

// retarget points req at base, keeping its path and query.
func retarget(req *http.Request, base *url.URL) *http.Request {
	out := req.Clone(req.Context())
	out.Body = req.Body
	out.URL.Scheme, out.URL.Host = base.Scheme, base.Host
	if p := strings.TrimSuffix(base.Path, "/"); p != "" {
		out.URL.Path = p + req.URL.Path
		out.URL.RawPath = ""
	}
	return out
}

// tierFailed reports whether a tier's answer means "try the next one".
func tierFailed(resp *http.Response, err error) bool {
	return err != nil || resp.StatusCode == http.StatusBadGateway ||
		resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout
}

// do sends req to its host's origin. A GET or HEAD from a client goes through the origin's tier
// chain first (primary, fallback); a tier that cannot answer (connection failure, 502, 503, 504)
// is skipped until it answers a probe again. Requests from lower tiers go to the origin.
func (u *upstream) do(req *http.Request) (*http.Response, error) {
	rt := u.routeFor(req.Host)
	if rt == nil {
		return nil, fmt.Errorf("route %s: no origin serves host %q; add it to origins[].hosts or set origin", req.URL.Path, req.Host)
	}
	role := roleLower
	if req.Header.Get(TierHeader) != "" {
		role = roleUpper
		req.Header.Del(TierHeader)
	}
	c := &rt.counters
	if role == roleLower && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
		for _, t := range rt.chain(req, time.Now()) {
			out := retarget(req, t.base)
			out.Header.Set(TierHeader, u.e.tierMarker())
			c.TierRequests.Add(1)
			resp, err := u.transport.RoundTrip(out)
			if !tierFailed(resp, err) {
				if x := resp.Header.Get("X-Cache"); x == Hit || x == Stale {
					c.Saved.Add(1) // the upper tier answered from its cache: no origin request
				}
				resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.TierBytes}
				return resp, nil
			}
			if err == nil {
				resp.Body.Close()
			}
			if req.Context().Err() != nil {
				return nil, fmt.Errorf("fetch %s through tier %s: %w", req.URL.Path, t.base.Host, req.Context().Err())
			}
			t.downUntil.Store(time.Now().Add(rt.interval).UnixNano())
			u.e.stats.TierFallbacks.Add(1)
			c.Fallbacks.Add(1)
			u.e.warn("upper tier failed, trying the next tier or the origin", "origin", rt.name, "tier", t.base.String(), "err", err)
		}
	}
	c.OriginRequests[role].Add(1)
	resp, err := u.transport.RoundTrip(retarget(req, rt.origin))
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.OriginBytes[role]}
	return resp, nil
}

// fetchUpstream sends req upstream and undoes the transfer codings the transport set aside.
func (e *Edge) fetchUpstream(req *http.Request) (*http.Response, error) {
	resp, err := e.upstream.do(req)
	if err != nil {
		return nil, err
	}
	if err := origin.UndoCodings(resp); err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("fetch %s: %w", req.URL.Path, err)
	}
	return resp, nil
}

// countingBody adds the bytes read from a response body to a counter.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	k, err := b.ReadCloser.Read(p)
	b.n.Add(int64(k))
	return k, err
}

// chain returns the tiers a miss tries, in order, at most two (primary and fallback), leaving
// out tiers that failed recently.
func (rt *route) chain(req *http.Request, now time.Time) []*tier {
	var order []*tier
	switch rt.topology {
	case TopologySmart:
		if p := rt.ranked.Load(); p != nil {
			order = *p
		} else {
			// Not measured yet: the generic topology stands in, as in the seed.
			order = rt.hashOrder(req)
		}
	case TopologyGeneric:
		order = rt.hashOrder(req)
	case TopologyCustom:
		order = rt.tiers
	}
	out := make([]*tier, 0, 2)
	for _, t := range order {
		if t.downUntil.Load() > now.UnixNano() {
			continue
		}
		if out = append(out, t); len(out) == 2 {
			break
		}
	}
	return out
}

// hashOrder orders the tiers by rendezvous hash of the request's host and target and each tier's
// position in the list, so every edge that lists the same tiers in the same order sends a URL to
// the same tier and, when it fails, to the same next one. The position, not the URL, names a
// tier: edges may reach one upper tier by different addresses (the lab's relays, NAT).
func (rt *route) hashOrder(req *http.Request) []*tier {
	type scored struct {
		t *tier
		s uint64
	}
	key := strings.ToLower(req.Host) + req.URL.RequestURI()
	s := make([]scored, len(rt.tiers))
	for i, t := range rt.tiers {
		h := fnv.New64a()
		h.Write([]byte(key))
		h.Write([]byte{0})
		h.Write([]byte{byte(i), byte(i >> 8)})
		s[i] = scored{t, mix64(h.Sum64())}
	}
	slices.SortStableFunc(s, func(a, b scored) int { return cmp.Compare(b.s, a.s) })
	out := make([]*tier, len(s))
	for i := range s {
		out[i] = s[i].t
	}
	return out
}

// mix64 is splitmix64's finaliser: FNV alone leaves the high bits of similar keys alike, and
// rendezvous hashing compares whole values.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// probeLoop measures every route's tiers now and then every route's interval.
func (u *upstream) probeLoop(routes []*route) {
	defer close(u.probeDone)
	next := make([]time.Time, len(routes))
	for {
		now := time.Now()
		wake := now.Add(time.Hour)
		for i, rt := range routes {
			if !now.Before(next[i]) {
				u.probe(rt)
				next[i] = time.Now().Add(rt.interval)
			}
			if next[i].Before(wake) {
				wake = next[i]
			}
		}
		select {
		case <-u.stop:
			return
		case <-time.After(time.Until(wake)):
		}
	}
}

// probe measures one route's tiers: every topology times the edge-to-tier round trip (a tier
// that answers is up again); the smart topology also asks each candidate for its own latency
// to the origin and ranks the candidates by it.
func (u *upstream) probe(rt *route) {
	var wg sync.WaitGroup
	for _, t := range rt.tiers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			self, origin := u.measure(rt, t)
			t.selfNS.Store(int64(self))
			t.originNS.Store(int64(origin))
			switch {
			case self > 0 && (rt.topology != TopologySmart || origin > 0):
				t.downUntil.Store(0)
			case rt.topology != TopologySmart:
				// Generic and custom have no ranking to leave: skip the tier until the next
				// probe instead of paying a failed attempt on every miss.
				t.downUntil.Store(time.Now().Add(rt.interval).UnixNano())
			}
		}()
	}
	wg.Wait()
	if rt.topology == TopologySmart {
		rt.rank(u.e)
	}
}

// rank orders the measured candidates by their latency to the origin and keeps the best two.
// All lower tiers rank by the same figure, so they agree on one upper tier per origin (the
// seed's claim). The current primary stays unless another is more than 10% faster (the seed's
// leaderboard: a choice that changes makes misses upstream).
func (rt *route) rank(e *Edge) {
	var ok []*tier
	for _, t := range rt.tiers {
		if t.originNS.Load() > 0 && t.selfNS.Load() > 0 {
			ok = append(ok, t)
		}
	}
	slices.SortStableFunc(ok, func(a, b *tier) int { return cmp.Compare(a.originNS.Load(), b.originNS.Load()) })
	var prev *tier
	if p := rt.ranked.Load(); p != nil && len(*p) > 0 {
		prev = (*p)[0]
	}
	if i := slices.Index(ok, prev); i > 0 && prev.originNS.Load()*10 <= ok[0].originNS.Load()*11 {
		ok = append([]*tier{prev}, slices.Delete(ok, i, i+1)...)
	}
	if len(ok) > 2 {
		ok = ok[:2]
	}
	rt.ranked.Store(&ok)
	if len(ok) > 0 && ok[0] != prev {
		e.log.Info("upper tier selected", "origin", rt.name, "tier", ok[0].base.String(),
			"latency_ms", float64(ok[0].originNS.Load())/1e6)
	}
}

// rttReport is the body of the RTT endpoint.
type rttReport struct {
	// OriginNS is the minimum latency of a request to the origin, in nanoseconds.
	OriginNS int64 `json:"origin_ns"`
}

// measure returns the edge-to-tier latency and, for the smart topology, the tier's reported
// latency to the route's origin; -1 for what failed.
func (u *upstream) measure(rt *route, t *tier) (self, origin time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	self, err := minLatency(ctx, u.transport, t.base.JoinPath(rttPath).String()+"?self=1", rt.samples)
	if err != nil {
		return -1, -1
	}
	if rt.topology != TopologySmart {
		return self, 0
	}
	target := t.base.JoinPath(rttPath).String() + "?origin=" + url.QueryEscape(rt.name)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	resp, err := u.transport.RoundTrip(req)
	if err != nil {
		return self, -1
	}
	defer resp.Body.Close()
	var rep rttReport
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&rep) != nil || rep.OriginNS <= 0 {
		return self, -1
	}
	return self, time.Duration(rep.OriginNS)
}

// minLatency times samples+1 requests to target and returns the fastest of the last samples;
// the first only opens the connection, so the figure is a request round trip, not a handshake.
func minLatency(ctx context.Context, rt http.RoundTripper, target string, samples int) (time.Duration, error) {
	best := time.Duration(-1)
	for i := 0; i <= samples; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, target, nil)
		if err != nil {
			return 0, fmt.Errorf("measure %s: %w", target, err)
		}
		start := time.Now()
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return 0, fmt.Errorf("measure %s: %w", target, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if d := time.Since(start); i > 0 && (best < 0 || d < best) {
			best = d
		}
	}
	return best, nil
}

// serveRTT answers the RTT endpoint: "?self=1" answers at once (the caller times it); otherwise
// the edge measures its own latency to the origin named by "?origin=" (a host of its origins,
// or the top-level origin when absent) and reports it.
func (e *Edge) serveRTT(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	setCacheHeaders(w.Header(), Bypass, 0)
	if r.URL.Query().Get("self") != "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	rt := e.upstream.routeNamed(r.URL.Query().Get("origin"))
	if rt == nil {
		writeError(w, http.StatusNotFound, Bypass, "no such origin here")
		return
	}
	samples := e.cfg.Tiers.ProbeSamples
	if samples <= 0 {
		samples = 3
	}
	d, err := rt.originLatency(r.Context(), e.upstream.transport, samples)
	if err != nil {
		e.log.Warn("measure origin latency failed", "err", err)
		writeError(w, http.StatusBadGateway, Bypass, msgBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rttReport{OriginNS: int64(d)})
}

// rttReuse is how long a candidate reuses its measured latency to an origin: every lower tier
// asks every interval, and the origin should see a few probes, not one per lower tier.
const rttReuse = 2 * time.Second

// originLatency measures (or reuses a measurement younger than rttReuse of) the minimum request
// round trip from this edge to the route's origin.
func (rt *route) originLatency(ctx context.Context, tr http.RoundTripper, samples int) (time.Duration, error) {
	rt.rttMu.Lock()
	defer rt.rttMu.Unlock()
	if time.Since(rt.rttAt) < rttReuse {
		return rt.rtt, nil
	}
	d, err := minLatency(ctx, tr, rt.origin.JoinPath("/").String(), samples)
	if err != nil {
		return 0, err
	}
	rt.rtt, rt.rttAt = d, time.Now()
	return d, nil
}

// ProbeTiers measures every route's tiers now (tests and experiments use it instead of waiting
// for the probe interval).
func (e *Edge) ProbeTiers() {
	for _, rt := range e.upstream.routes {
		if len(rt.tiers) > 0 {
			e.upstream.probe(rt)
		}
	}
}
