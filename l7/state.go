package l7

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/compress"
	"github.com/switchyard/switchyard/internal/connlimit"
	"github.com/switchyard/switchyard/internal/proxyproto"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
	"github.com/switchyard/switchyard/l7/health"
	"github.com/switchyard/switchyard/l7/limit"
	"github.com/switchyard/switchyard/l7/route"
)

// state is everything a configuration produces at run time. A reload builds a new state and swaps
// it in atomically; requests already running keep the state they started with.
type state struct {
	cfg    *Config
	table  *route.Table
	routes []*routeRT // by route.Index
	pools  map[string]*pool
	global *limit.Gate
	cancel context.CancelFunc // stops health checkers
	// needHeaders: some route, rate limit or hash key reads request headers, so the engines
	// must build the header map (otherwise it skips that allocation).
	needHeaders bool
}

// routeRT is a route's runtime.
type routeRT struct {
	cfg     Route
	pool    *pool
	limiter *limit.Buckets
	keyOf   func(*http.Request) string
	timeout time.Duration
	retry   *core.RetryPolicy // nil without a retry policy
	// admission is the core's view of the gates, rate limit, budget and balancer of the route
	admission core.Admission
	// series resolved once per configuration, so the request path does no label lookup
	limitedCount prometheus.Counter
	durationObs  prometheus.Observer
	// requestHeaders and responseHeaders modify the fields on the way (filters:; nil: none)
	requestHeaders, responseHeaders *core.HeaderFilter
	redirect                        *Redirect        // answered by the proxy (net/http engine); nil: sent on
	rewrite                         *URLRewrite      // the path and Host the backend gets; nil: the client's
	mirror                          *mirrorRT        // copies requests to a shadow pool; nil: none
	compress                        *compress.Policy // compresses responses; nil: none
	// split picks among members, one routeRT per pool of a weighted route (members[0] is rt);
	// nil for a route to one pool.
	split    *balance.Weighted
	members  []*routeRT
	splitKey balance.Key // split_key: the same pool for the same key; nil: none
}

// pool is a pool's runtime.
type pool struct {
	name      string
	cfg       Pool
	backends  []*balance.Backend
	picker    balance.Picker
	sticky    *balance.Sticky
	transport http.RoundTripper
	// checkTransport carries the active health checks, outside the descriptor budget.
	checkTransport http.RoundTripper
	closeIdle      func() // closes idle upstream connections; the pool is retired
	scheme         string
	gate           *limit.Gate
	budget         *limit.RetryBudget
	detector       *health.Detector
	// ipOnly: every backend is given as an IP address, so the event loops can connect to any of
	// them themselves (they hand requests to host-name pools to the goroutine engine, before
	// admission, so nothing is counted twice).
	ipOnly bool
	// up is the goroutine engine's connection pool (HTTP/1.1 pools only; nil for h2c and h2).
	up *upstreams
	// h2up is the request core's HTTP/2 connection pool (h2 and h2c pools; nil otherwise).
	h2up      *h2Upstreams
	shedCount prometheus.Counter
}

// splitRoute completes base (the route's settings, shared by its pools) for each pool the route
// sends to: one routeRT per pool, each with its pool's admission; with several, the first
// carries the weighted split that picks among them (routeRT.pick).
func (s *Server) splitRoute(st *state, base *routeRT) *routeRT {
	splits := base.cfg.Splits()
	members := make([]*routeRT, 0, len(splits))
	weights := make([]int, 0, len(splits))
	names := make([]string, 0, len(splits))
	for _, sp := range splits {
		rt := *base
		rt.pool = st.pools[sp.Pool]
		rt.durationObs = s.metrics.duration.WithLabelValues(base.cfg.Name, sp.Pool)
		if rt.pool == nil {
			return &rt // a redirect route: no pool, answered before admission (filters.go)
		}
		rt.admission = core.Admission{Global: st.global, Pool: rt.pool.gate, KeyOf: rt.keyOf,
			Budget: rt.pool.budget, Picker: rt.pool.picker}
		if rt.limiter != nil {
			rt.admission.Limiter = rt.limiter // one rate limit for the route, whichever pool
		}
		members = append(members, &rt)
		weights = append(weights, sp.Weight)
		names = append(names, sp.Pool)
	}
	if len(members) > 1 {
		members[0].split = balance.NewWeighted(names, weights)
		members[0].members = members
		if k := base.cfg.SplitKey; k != "" {
			members[0].splitKey, _ = balance.ParseKey(k) // validated
		}
	}
	return members[0]
}

// pick is the routeRT of the pool request r goes to: rt itself, or for a weighted split the
// next pool by smooth weighted round robin (exact shares over every sum of the weights), or
// with a split_key the pool that key always gets (balance.Weighted.Sticky).
func (rt *routeRT) pick(r *http.Request) *routeRT {
	switch {
	case rt.split == nil:
		return rt
	case rt.splitKey != nil:
		return rt.members[rt.split.Sticky(rt.splitKey(r))]
	}
	return rt.members[rt.split.Next()]
}

// buildState compiles cfg. Backends present in prev (same pool, same address) are reused so
// health, drain and ejection state survive a reload.
func (s *Server) buildState(cfg *Config, prev *state) (*state, error) {
	table, err := route.Compile(cfg.routeSpecs())
	if err != nil {
		return nil, err
	}
	st := &state{cfg: cfg, table: table, pools: map[string]*pool{}, global: limit.NewGate(cfg.Limits.MaxInFlight)}
	for _, pc := range cfg.Pools {
		var tc *tls.Config
		if pc.Protocol == "h2" || pc.TLS != nil {
			if tc, err = pc.TLS.config(pc.InsecureSkipVerify); err != nil {
				return nil, fmt.Errorf("pool %s: tls: %w", pc.Name, err)
			}
		}
		st.pools[pc.Name] = s.buildPool(pc, tc, prev)
		if pc.Hash != nil && (strings.HasPrefix(pc.Hash.Key, "header:") || strings.HasPrefix(pc.Hash.Key, "cookie:")) {
			st.needHeaders = true
		}
	}
	for _, rc := range cfg.Routes {
		rt := &routeRT{cfg: rc, timeout: cfg.Timeouts.Total,
			limitedCount: s.metrics.limited.WithLabelValues(rc.Name)}
		st.needHeaders = st.needHeaders || len(rc.Match.Headers) > 0 ||
			strings.HasPrefix(rc.SplitKey, "header:") || strings.HasPrefix(rc.SplitKey, "cookie:")
		if rc.Timeout > 0 {
			rt.timeout = rc.Timeout
		}
		rl := rc.RateLimit
		if rl == nil {
			rl = cfg.RateLimit
		}
		if rl != nil {
			rt.limiter = limit.NewBuckets(rl.Rate, rl.Burst)
			rt.keyOf = balance.ClientIP
			if name, ok := strings.CutPrefix(rl.Key, "header:"); ok {
				name = http.CanonicalHeaderKey(name)
				rt.keyOf = func(r *http.Request) string { return r.Header.Get(name) }
				st.needHeaders = true
			}
		}
		if rc.Retry != nil {
			rt.retry = &core.RetryPolicy{Attempts: rc.Retry.Attempts, OnStatus: map[int]bool{},
				NonIdempotent: rc.Retry.NonIdempotent, BufferBody: rc.Retry.BufferBody}
			for _, code := range rc.Retry.OnStatus {
				rt.retry.OnStatus[code] = true
			}
			rt.retry.OnGRPCStatus = map[int]bool{}
			for _, name := range rc.Retry.GRPCStatus {
				rt.retry.OnGRPCStatus[core.GRPCCodes[name]] = true
			}
		}
		if fl := rc.Filters; fl != nil {
			rt.requestHeaders, rt.responseHeaders, rt.redirect = fl.RequestHeaders.filter(), fl.ResponseHeaders.filter(), fl.Redirect
			rt.rewrite = fl.URLRewrite
		}
		if m := rc.Mirror; m != nil {
			rt.mirror = s.newMirror(rc.Name, m, st.pools[m.Pool], cfg.Timeouts.Total)
		}
		rt.compress = compress.NewPolicy(rc.Compress)
		rt = s.splitRoute(st, rt)
		st.routes = append(st.routes, rt)
	}
	return st, nil
}

func (s *Server) buildPool(pc Pool, tc *tls.Config, prev *state) *pool {
	p := &pool{name: pc.Name, cfg: pc, gate: limit.NewGate(pc.MaxInFlight), scheme: "http",
		budget: limit.NewRetryBudget(pc.RetryBudget.Percent, pc.RetryBudget.MinPerSecond)}
	var old map[string]*balance.Backend
	if prev != nil {
		if op := prev.pools[pc.Name]; op != nil {
			old = map[string]*balance.Backend{}
			for _, b := range op.backends {
				old[b.Address] = b
			}
		}
	}
	p.ipOnly = true
	for _, bc := range pc.Backends {
		if ap, err := netip.ParseAddrPort(bc.Address); err != nil || ap.Addr().Zone() != "" {
			p.ipOnly = false
		}
		b := old[bc.Address]
		if b == nil || b.Weight != bc.Weight {
			nb := balance.NewBackend(bc.Address, bc.Weight)
			if b != nil {
				nb.SetHealthy(b.Healthy())
				nb.SetDraining(b.Draining())
			}
			b = nb
		}
		p.backends = append(p.backends, b)
	}
	switch pc.Balance {
	case "least_request":
		p.picker = balance.NewLeastRequest(p.backends)
	case "hash":
		key, _ := balance.ParseKey(pc.Hash.Key) // validated with the config
		p.picker = balance.NewRing(p.backends, key, pc.Hash.LoadFactor)
	default:
		p.picker = balance.NewRoundRobin(p.backends)
	}
	if pc.Sticky != nil {
		p.sticky = balance.NewSticky(p.picker, p.backends, pc.Sticky.Cookie)
		p.picker = p.sticky
	}
	// Requests dial through the descriptor budget; health checks through a transport of their
	// own that does not, so that they keep working (on the reserve) when requests fill it.
	transport, closeForward := newTransport(pc, tc, s.conns.Dial)
	check, closeCheck := newTransport(pc, tc, nil)
	p.transport, p.checkTransport = transport, check
	closeTransport := func() { closeForward(); closeCheck() }
	p.closeIdle = closeTransport
	switch pc.Protocol {
	case "h2", "h2c":
		if pc.Protocol == "h2" {
			p.scheme = "https"
		}
		p.h2up = newH2Upstreams(transport.(*http.Transport), p.scheme)
		p.closeIdle = func() { closeTransport(); p.h2up.closeIdle(true) }
	default:
		if tc != nil {
			p.scheme = "https" // HTTP/1.1 over TLS (pools[].tls)
		}
		p.up = newUpstreams(pc, s.conns, tc)
		// A pool is closed only when its configuration is retired (reload, stop): connections
		// still busy then are closed when their responses end instead of pooled.
		p.closeIdle = func() { closeTransport(); p.up.closeIdle(true) }
	}
	p.shedCount = s.metrics.shed.WithLabelValues(pc.Name)
	if pc.Outlier != nil {
		p.detector = health.NewDetector(health.Outlier{ConsecutiveErrors: pc.Outlier.ConsecutiveErrors,
			EjectionTime: pc.Outlier.EjectionTime, MaxEjectedPercent: pc.Outlier.MaxEjectedPercent},
			p.backends, func(b *balance.Backend, _ bool) {
				s.metrics.ejections.WithLabelValues(pc.Name, b.Address).Inc()
				s.log.Warn("backend ejected", "pool", pc.Name, "backend", b.Address, "for", pc.Outlier.EjectionTime)
			})
	}
	for _, b := range p.backends {
		s.metrics.healthy.WithLabelValues(pc.Name, b.Address).Set(boolGauge(b.Healthy()))
	}
	return p
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// startHealth launches the active checkers of every pool that configures them.
func (s *Server) startHealth(st *state) {
	ctx, cancel := context.WithCancel(context.Background())
	st.cancel = cancel
	for _, p := range st.pools {
		h := p.cfg.Health
		if h == nil {
			continue
		}
		c := health.NewChecker(health.Check{Path: h.Path, GRPC: h.Type == "grpc", Service: h.Service, Interval: h.Interval, Timeout: h.Timeout,
			Rise: h.Rise, Fall: h.Fall, Expect: h.Expect, Scheme: p.scheme, Local: core.LocalResource},
			&http.Client{Transport: p.checkTransport},
			func(b *balance.Backend, healthy bool) {
				s.metrics.healthy.WithLabelValues(p.name, b.Address).Set(boolGauge(healthy))
				s.log.Info("backend health", "pool", p.name, "backend", b.Address, "healthy", healthy)
			})
		go c.Run(ctx, p.backends)
	}
}

// newTransport builds a pooled upstream transport for the pool's protocol. counted, when set,
// wraps its dialer so that every connection it opens is counted against the descriptor budget
// until closed (an HTTP/2 client's streams may open many).
func newTransport(pc Pool, tc *tls.Config, counted func(connlimit.DialFunc) connlimit.DialFunc) (http.RoundTripper, func()) {
	dialer := &net.Dialer{Timeout: pc.Timeouts.Connect, KeepAlive: 30 * time.Second}
	dial := connlimit.DialFunc(dialer.DialContext)
	if counted != nil {
		dial = counted(dial)
	}
	v := proxyVersion(pc.SendProxyProtocol)
	if v != 0 {
		dial = proxyDial(v, dial)
	}
	t := &http.Transport{
		DialContext:           dial,
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   pc.MaxIdlePerBackend,
		IdleConnTimeout:       pc.Timeouts.Idle,
		ResponseHeaderTimeout: pc.Timeouts.Header,
		TLSHandshakeTimeout:   pc.Timeouts.Connect,
		ExpectContinueTimeout: time.Second,
		// The proxy forwards the client's Accept-Encoding and must not decompress bodies itself.
		DisableCompression: true,
		Protocols:          new(http.Protocols),
		// A PROXY header names one client: a connection per request on this path (the core
		// keeps such connections per client connection instead: upstreams.get).
		DisableKeepAlives: v != 0 && counted != nil,
	}
	switch pc.Protocol {
	case "h2c", "h2":
		// HTTP/2 connections gather their frames' writes (batchConn); TLS (h2) runs on top.
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newBatchConn(c), nil
		}
		if pc.Protocol == "h2c" {
			t.Protocols.SetUnencryptedHTTP2(true)
		} else {
			t.Protocols.SetHTTP2(true)
			t.TLSClientConfig = tc
		}
	default:
		t.Protocols.SetHTTP1(true)
		t.TLSClientConfig = tc // nil: a cleartext pool
	}
	return t, t.CloseIdleConnections
}

// poolName is the name of the route's pool, "" for a redirect route (no pool).
func (rt *routeRT) poolName() string {
	if rt.pool == nil {
		return ""
	}
	return rt.pool.name
}

// proxyDial starts each connection with a PROXY header of version v: the client's, from the
// request's exchange (net/http's path), or LOCAL without one (health checks).
func proxyDial(v int, dial connlimit.DialFunc) connlimit.DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		var ends clientEnds
		if ex, ok := ctx.Value(exchangeKey).(*exchange); ok {
			ends = ex.client
		}
		if _, err := c.Write(proxyproto.Header(v, ends.src, ends.dst)); err != nil {
			c.Close()
			return nil, fmt.Errorf("send proxy protocol header to %s: %w", addr, err)
		}
		return c, nil
	}
}
