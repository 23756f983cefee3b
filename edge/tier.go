package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// upstream sends the edge's fetches to the origin, or through the upper tier with the lowest
// measured latency to the origin (Cloudflare's Smart Tiered Cache), falling back to the origin
// when that tier fails.
type upstream struct {
	e         *Edge
	transport *http.Transport
	origin    *url.URL
	tiers     []*tier
	best      atomic.Pointer[tier]
	stop      chan struct{}
	stopOnce  sync.Once
	probeDone chan struct{}
}

// tier is one upper-tier candidate and its last measurement.
type tier struct {
	base *url.URL
	// Score is the last measured edge-to-tier plus tier-to-origin latency; 0 means unmeasured
	// or failed.
	score atomic.Int64
}

// TierStatus describes one candidate for stats and tests.
type TierStatus struct {
	// URL is the candidate's base URL.
	URL string `json:"url"`
	// ScoreMS is the measured latency to the origin through this tier, -1 when it failed.
	ScoreMS float64 `json:"score_ms"`
	// Selected is true for the tier misses currently go through.
	Selected bool `json:"selected"`
}

func newUpstream(e *Edge, cfg Config) (*upstream, error) {
	origin, err := url.Parse(cfg.Origin)
	if err != nil {
		return nil, fmt.Errorf("parse origin %q: %w", cfg.Origin, err)
	}
	dialPlain, dialTLS := teDialers(&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second})
	u := &upstream{
		e:      e,
		origin: origin,
		transport: &http.Transport{
			Proxy:               nil,       // the origin is addressed directly, never through an environment proxy
			DialContext:         dialPlain, // edge/tefix.go: transfer codings Go's client refuses
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 256,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true, // pass encodings through untouched; Vary handles variants
			DialTLSContext:      dialTLS,
		},
		stop:      make(chan struct{}),
		probeDone: make(chan struct{}),
	}
	for _, c := range cfg.Tiers.Candidates {
		b, err := url.Parse(c)
		if err != nil {
			return nil, fmt.Errorf("parse tier %q: %w", c, err)
		}
		u.tiers = append(u.tiers, &tier{base: b})
	}
	if len(u.tiers) == 0 {
		close(u.probeDone)
		return u, nil
	}
	go u.probeLoop(time.Duration(cfg.Tiers.ProbeInterval), cfg.Tiers.ProbeSamples)
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

// do sends req through the selected tier, or to the origin. A GET or HEAD that the tier cannot
// answer (connection failure, 502, 503, 504) is sent to the origin directly.
func (u *upstream) do(req *http.Request) (*http.Response, error) {
	if t := u.best.Load(); t != nil && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
		resp, err := u.transport.RoundTrip(retarget(req, t.base))
		if err == nil && resp.StatusCode != http.StatusBadGateway &&
			resp.StatusCode != http.StatusServiceUnavailable && resp.StatusCode != http.StatusGatewayTimeout {
			return resp, nil
		}
		if err == nil {
			resp.Body.Close()
		}
		if req.Context().Err() != nil {
			return nil, fmt.Errorf("fetch %s through tier %s: %w", req.URL.Path, t.base.Host, req.Context().Err())
		}
		u.e.stats.TierFallbacks.Add(1)
		u.e.log.Warn("upper tier failed, fetching from the origin", "tier", t.base.String(), "err", err)
		u.best.CompareAndSwap(t, nil) // until the next probe finds a healthy tier
	}
	return u.transport.RoundTrip(retarget(req, u.origin))
}

// probeLoop measures the candidates now and every interval.
func (u *upstream) probeLoop(interval time.Duration, samples int) {
	defer close(u.probeDone)
	for {
		u.probe(samples)
		select {
		case <-u.stop:
			return
		case <-time.After(interval):
		}
	}
}

// probe measures every candidate and selects the one with the lowest total latency to the
// origin: edge-to-tier (timed here) plus tier-to-origin (measured and reported by the tier).
func (u *upstream) probe(samples int) {
	var wg sync.WaitGroup
	for _, t := range u.tiers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.score.Store(int64(u.measure(t.base, samples)))
		}()
	}
	wg.Wait()
	var best *tier
	for _, t := range u.tiers {
		if s := t.score.Load(); s > 0 && (best == nil || s < best.score.Load()) {
			best = t
		}
	}
	if prev := u.best.Swap(best); prev != best && best != nil {
		u.e.log.Info("upper tier selected", "tier", best.base.String(),
			"latency_ms", float64(best.score.Load())/1e6)
	}
}

// rttReport is the body of the RTT endpoint.
type rttReport struct {
	// OriginNS is the minimum latency of a request to the origin, in nanoseconds.
	OriginNS int64 `json:"origin_ns"`
}

// measure returns edge-to-tier plus tier-to-origin latency, or -1 when the tier fails.
func (u *upstream) measure(base *url.URL, samples int) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	self, err := minLatency(ctx, u.transport, base.JoinPath(rttPath).String()+"?self=1", samples)
	if err != nil {
		return -1
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base.JoinPath(rttPath).String(), nil)
	resp, err := u.transport.RoundTrip(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var rep rttReport
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&rep) != nil || rep.OriginNS <= 0 {
		return -1
	}
	return self + time.Duration(rep.OriginNS)
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
// the edge measures its own latency to its origin and reports it.
func (e *Edge) serveRTT(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	setCacheHeaders(w.Header(), Bypass, 0)
	if r.URL.Query().Get("self") != "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	d, err := minLatency(r.Context(), e.upstream.transport, e.upstream.origin.JoinPath("/").String(), e.cfg.Tiers.ProbeSamples)
	if err != nil {
		e.log.Warn("measure origin latency failed", "err", err)
		writeError(w, http.StatusBadGateway, Bypass, msgBadGateway)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rttReport{OriginNS: int64(d)})
}

// Tiers reports the candidates' last measurements and which one is selected.
func (e *Edge) Tiers() []TierStatus {
	best := e.upstream.best.Load()
	var out []TierStatus
	for _, t := range e.upstream.tiers {
		s := float64(t.score.Load()) / 1e6
		if s <= 0 {
			s = -1
		}
		out = append(out, TierStatus{URL: t.base.String(), ScoreMS: s, Selected: t == best})
	}
	return out
}

// ProbeTiers measures the candidates now (tests and the admin API use it instead of waiting
// for the probe interval).
func (e *Edge) ProbeTiers() { e.upstream.probe(e.cfg.Tiers.ProbeSamples) }
