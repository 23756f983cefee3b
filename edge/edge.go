// Package edge is switchyard's edge cache: an HTTP cache close to the user that follows RFC 9111
// and RFC 5861, collapses concurrent misses into one upstream fetch streamed to every waiter,
// serves stale responses while revalidating or when the origin fails, keeps responses in a memory
// tier and a disk tier that survives restarts, and takes purges and pushes through an
// authenticated admin API. With upper-tier candidates configured it fetches misses through the
// one with the lowest measured latency to the origin, falling back to the origin directly.
//
// It is embeddable: New builds an Edge from a Config, Edge is an http.Handler, and Start listens
// on the configured addresses (":0" works) so the lab and the tests can run it anywhere.
package edge

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/edge/cachecontrol"
	"github.com/switchyard/switchyard/edge/fastpath"
	"github.com/switchyard/switchyard/edge/store"
	"github.com/switchyard/switchyard/internal/compress"
	"github.com/switchyard/switchyard/internal/connlimit"
	"github.com/switchyard/switchyard/internal/h1"
	"github.com/switchyard/switchyard/internal/handover"
	"github.com/switchyard/switchyard/internal/httppath"
	"github.com/switchyard/switchyard/internal/lograte"
	"github.com/switchyard/switchyard/internal/tlsconf"
)

// Edge is one edge cache. Create it with New; it is safe for concurrent use.
type Edge struct {
	cfg   Config
	log   *slog.Logger
	warns lograte.Limiter // per-request warnings, at most one line a second each
	// handshakes runs the TLS listener's handshakes, failures counted and logged
	handshakes *tlsconf.Handshakes
	sockets    *handover.Sockets // listeners inherited from, and kept for, an upgrade
	store      *store.Store
	stats      Stats
	registry   *prometheus.Registry
	upstream   *upstream
	// tierCAs are the authorities a lower tier's client certificate must chain to for its
	// marker to count (tiers.client_ca_file, edge/tiermtls.go); nil: the token alone.
	tierCAs   *x509.CertPool
	heuristic cachecontrol.Heuristic
	clock     func() time.Time // the cache's clock (edge/clock.go); nil is the wall clock

	// passes are the request fields forwarded as the client sent them (edge/requestheaders.go).
	passes map[string]bool

	// fills are the upstream fetches in flight, by variant key (request collapsing).
	fillsMu sync.Mutex
	fills   map[string]*fill

	// pass remembers URLs whose responses were uncacheable, so they skip the collapsing queue.
	pass *otter.Cache[string, struct{}]
	// unsliced remembers URLs on sliced origins cached whole for pass_ttl (the origin ignored
	// Range, the object is short, or its ranges cannot be combined; edge/slice.go).
	unsliced *otter.Cache[string, struct{}]

	// variants maps a primary key to the Vary header names and variant keys stored under it.
	variantsMu sync.RWMutex
	variants   map[string]*variantSet
	// compress is the compression rule at run time (nil: none), encoding its first compressions.
	compress *compress.Policy
	encoding encoding

	servers []*http.Server
	addrs   []net.Addr
	fast    *fastpath.Server // the client listener's fast path; nil when disabled or not started
	front   *frontDoor       // the TLS and HTTP/3 listeners (edge/frontdoor.go); nil without tls:
	h2      h2Conns          // the HTTP/2 connections served, TLS and h2c
	// acme is the TLS listener's certificates with tls.acme:, whose HTTP-01 challenges the
	// plain listener answers; set while that listener already serves, hence atomic.
	acme  atomic.Pointer[tlsconf.Certs]
	conns *connlimit.Budget // client connections against max_connections, after Start

	// id names this edge in PushPathHeader; pushPeers are admin.push_to (edge/pushforward.go).
	id        string
	pushPeers atomic.Pointer[[]PushPeer]
	// fleet sends purges on to the fleet's members (admin.fleet, edge/fleetpurge.go); nil: none.
	fleet *fleet
	// gcStop ends the collector's headroom ApplyMemoryLimit keeps (edge/memlimit.go); nil: none.
	gcStop func()
}

// variantSet is what the edge knows about the variants of one URL.
type variantSet struct {
	names []string
	keys  map[string]struct{}
}

// Option changes an Edge built by New.
type Option func(*Edge)

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(e *Edge) { e.log = l } }

// WithSockets listens through sk: listeners inherited from the process this one replaces are
// served instead of bound again, and every listener is kept to pass on (internal/handover).
func WithSockets(sk *handover.Sockets) Option { return func(e *Edge) { e.sockets = sk } }

// New builds an Edge: it fills cfg's defaults and validates it, opens the store (rebuilding the
// disk index) and, with tier candidates, starts measuring them. Call Close to stop it.
func New(cfg Config, opts ...Option) (*Edge, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("configure edge: %w", err)
	}
	e := &Edge{
		cfg:       cfg,
		log:       slog.Default(),
		fills:     map[string]*fill{},
		variants:  map[string]*variantSet{},
		heuristic: cachecontrol.Heuristic{Fraction: cfg.Heuristic.Fraction, Max: time.Duration(cfg.Heuristic.Max)},
		passes:    passSet(cfg.RequestHeaders),
		compress:  compress.NewPolicy(cfg.Compress),
		id:        newInstanceID(),
	}
	e.SetPushPeers(cfg.Admin.PushTo)
	for _, o := range opts {
		o(e)
	}
	st, err := store.Open(store.Config{
		MemoryBytes:    int64(cfg.Memory.MaxBytes),
		MemoryObjects:  cfg.Memory.MaxObjects,
		Eviction:       cfg.Memory.Eviction,
		MaxObjectBytes: int64(cfg.Memory.MaxObjectBytes),
		Dir:            cfg.Disk.Dir,
		DiskBytes:      int64(cfg.Disk.MaxBytes),
		Directives: func(h http.Header) cachecontrol.Directives {
			return cachecontrol.Parse(cachecontrol.Effective(h, cfg.TargetedCacheControl))
		},
		OnEvict: func(tier string) {
			if tier == "disk" {
				e.stats.DiskEvictions.Add(1)
			} else {
				e.stats.MemoryEvictions.Add(1)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create edge: %w", err)
	}
	e.store = st
	st.All(func(m *store.Meta) bool {
		if len(m.Vary) > 0 || m.Status == http.StatusPartialContent { // variants and slices
			e.rememberVariant(m)
		}
		return true
	})
	e.pass, err = otter.New(&otter.Options[string, struct{}]{
		MaximumSize:      100_000,
		ExpiryCalculator: otter.ExpiryWriting[string, struct{}](time.Duration(cfg.PassTTL)),
	})
	if err != nil {
		return nil, fmt.Errorf("create edge: pass memory: %w", err)
	}
	e.unsliced, err = otter.New(&otter.Options[string, struct{}]{
		MaximumSize:      100_000,
		ExpiryCalculator: otter.ExpiryWriting[string, struct{}](time.Duration(cfg.PassTTL)),
	})
	if err != nil {
		return nil, fmt.Errorf("create edge: unsliced memory: %w", err)
	}
	tierCert, tierCAs, err := loadTierMTLS(cfg)
	if err != nil {
		return nil, fmt.Errorf("create edge: %w", err)
	}
	e.tierCAs = tierCAs
	if e.upstream, err = newUpstream(e, cfg, tierCert); err != nil {
		return nil, fmt.Errorf("create edge: %w", err)
	}
	e.registry = newRegistry(e)
	e.handshakes = tlsconf.NewHandshakes(e.registry, e.log)
	return e, nil
}

// guardState tells a connection screened by h1's guard whether net/http is inside a request.
func guardState(c net.Conn, st http.ConnState) {
	if g, ok := c.(*h1.GuardConn); ok {
		g.SetActive(st == http.StateActive)
	}
}

// Stats returns the live counters.
func (e *Edge) Stats() *Stats { return &e.stats }

// Registry returns the Prometheus registry holding this edge's switchyard_edge_* metrics.
func (e *Edge) Registry() *prometheus.Registry { return e.registry }

// Start listens on cfg.Listen (and cfg.Admin.Listen when set) and serves in the background.
func (e *Edge) Start() error {
	bind := func(addr string, h http.Handler, client bool) error {
		ln, err := e.sockets.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("start edge: listen on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: clientReadHeader, IdleTimeout: clientIdle,
			ErrorLog: slog.NewLogLogger(e.log.Handler(), slog.LevelDebug), ConnState: guardState}
		fast := client && !e.cfg.DisableFastPath
		if client {
			// Clients are capped and a slow reader is cut (edge/conns.go); net/http's write
			// timeout runs from each request's head to the end of its response.
			srv.WriteTimeout = time.Duration(e.cfg.ClientTimeout)
			ln, e.conns = limitClients(ln, e.cfg.MaxConnections, &e.stats.ConnsRefused)
		}
		e.servers = append(e.servers, srv)
		e.addrs = append(e.addrs, ln.Addr())
		if !fast {
			// Heads and chunked bodies are screened by internal/h1, as on the fast path's
			// hand-over; a client connection that opens with the HTTP/2 preface is h2c.
			var l net.Listener = ln
			if client {
				hand := h1.NewHandover(ln.Addr())
				go e.sniffH2C(ln, hand)
				l = hand
			}
			go srv.Serve(&h1.GuardListener{Listener: l, MaxHeaderBytes: clientMaxHead})
			return nil
		}
		// Fresh memory hits are answered on the fast path; it hands every other connection over
		// to srv (edge/fastpath).
		e.fast = e.newFastPath(ln)
		go srv.Serve(e.fast.Fallback())
		go e.fast.Serve()
		return nil
	}
	if err := bind(e.cfg.Listen, e, true); err != nil {
		return err
	}
	if e.cfg.TLS != nil {
		if err := e.startTLS(); err != nil {
			e.Close()
			return err
		}
	}
	if e.cfg.Admin.Listen != "" {
		if err := bind(e.cfg.Admin.Listen, e.AdminHandler(), false); err != nil {
			e.Close()
			return err
		}
	}
	if fc := e.cfg.Admin.Fleet; fc != nil {
		f, err := newFleet(fc, e.id)
		if err != nil {
			e.Close()
			return fmt.Errorf("start edge: %w", err)
		}
		e.fleet = f
	}
	e.log.Info("edge started", "listen", e.addrs[0].String(), "origin", e.cfg.Origin)
	return nil
}

// Addr returns the address the cache listens on, after Start.
func (e *Edge) Addr() string { return e.addrs[0].String() }

// URL returns "http://" + Addr().
func (e *Edge) URL() string { return "http://" + e.Addr() }

// AdminAddr returns the admin API's address after Start, or "" when it is disabled.
func (e *Edge) AdminAddr() string {
	if len(e.addrs) < 2 {
		return ""
	}
	return e.addrs[1].String()
}

// Close stops the listeners, the tier prober and idle upstream connections.
func (e *Edge) Close() error {
	var errs []error
	e.h2.shutdown()
	if e.fast != nil {
		e.fast.Close(2 * time.Second)
	}
	if e.front != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		errs = append(errs, e.front.shutdown(ctx))
		cancel()
	}
	for _, s := range e.servers {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := s.Shutdown(ctx); err != nil {
			errs = append(errs, s.Close())
		}
		cancel()
	}
	e.upstream.close()
	e.pass.StopAllGoroutines()
	e.unsliced.StopAllGoroutines()
	if e.fleet != nil {
		e.fleet.close()
	}
	if e.gcStop != nil {
		e.gcStop()
		e.gcStop = nil
	}
	return errors.Join(errs...)
}

// rttPath is answered by the edge itself: upper-tier candidates report their latency to the
// origin on it, and lower tiers time it to measure their latency to the candidate.
const rttPath = "/.well-known/switchyard-edge/rtt"

// ServeHTTP answers one client request.
func (e *Edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The CA's HTTP-01 request (edge/frontdoor.go). The fast path has no hit for it (the token
	// is new with every order and the answer is never cached), so it always arrives here.
	if e.acme.Load().HandleHTTPChallenge(w, r) {
		return
	}
	if r.Method == http.MethodConnect {
		// The edge is its origin's reverse proxy, not a forward proxy: a tunnel to any
		// host:port the client names would make it an open relay.
		writeError(w, http.StatusMethodNotAllowed, Bypass, msgConnect)
		return
	}
	// Cache and forward the path the origin resolves: "/a/../admin" is keyed and sent as
	// "/admin", "//x" as "/x" (as the L7 proxy does), and a path an origin could decode
	// differently from the edge (an encoded slash, a backslash, NUL) is refused.
	clean, err := httppath.Normalize(r.URL.Path, r.URL.EscapedPath())
	if err != nil {
		writeError(w, http.StatusBadRequest, Bypass, msgBadPath)
		return
	}
	if clean != r.URL.Path {
		r.URL.Path, r.URL.RawPath = clean, ""
	}
	e.checkTierMarker(r) // edge/tierauth.go: only lower tiers holding tiers.token are honoured
	if r.URL.Path == rttPath {
		e.serveRTT(w, r)
		return
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		e.serveCounted(w, r) // edge/tierstats.go: per-origin analytics around serveCacheable
	default:
		e.serveUnsafe(w, r)
	}
}

// primaryKey is the cache key shared by every variant: the lower-cased host and the request
// URI under the cache_key rules (cachekey.go). Scheme is left out because the edge serves one
// scheme per listener.
func (e *Edge) primaryKey(host, requestURI string) string {
	return strings.ToLower(host) + e.cfg.CacheKey.keyURI(requestURI)
}

// variantKey appends the values of the request headers the URL varies on, so each variant is
// its own entry (RFC 9111 4.1). Values are normalised by trimming and lower-casing.
func variantKey(primary string, names []string, h http.Header) string {
	if len(names) == 0 {
		return primary
	}
	var b strings.Builder
	b.WriteString(primary)
	for _, n := range names {
		b.WriteString("\n")
		b.WriteString(n)
		b.WriteString(":")
		b.WriteString(varyValue(h, n))
	}
	return b.String()
}

// varyValue normalises the value of a request header named by Vary: field lines and list
// elements joined by "," without spaces, lower-cased, so "gzip, br" and "GZIP,br" select the same
// variant (RFC 9111 4.1 allows normalising whitespace and case where the field's semantics do).
func varyValue(h http.Header, name string) string {
	var parts []string
	for _, line := range h.Values(name) {
		for _, p := range strings.Split(line, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, strings.ToLower(p))
			}
		}
	}
	return strings.Join(parts, ",")
}

// varyNames returns the canonical header names of a response's Vary field, sorted by appearance.
func varyNames(h http.Header) []string {
	var out []string
	for _, line := range h.Values("Vary") {
		for _, f := range strings.Split(line, ",") {
			if f = strings.TrimSpace(f); f != "" {
				out = append(out, http.CanonicalHeaderKey(f))
			}
		}
	}
	return out
}

// lookupKey returns the variant key of a request under what the edge knows of the URL's Vary.
func (e *Edge) lookupKey(primary string, h http.Header) string {
	e.variantsMu.RLock()
	vs := e.variants[primary]
	e.variantsMu.RUnlock()
	if vs == nil {
		return variantKey(primary, e.cfg.RequestHeaders.Key, h) // the primary key unless keyed fields are set
	}
	return variantKey(primary, vs.names, h)
}

// rememberVariant records the Vary names and key of a stored variant.
func (e *Edge) rememberVariant(m *store.Meta) {
	e.variantsMu.Lock()
	defer e.variantsMu.Unlock()
	vs := e.variants[m.Primary]
	if vs == nil || !equalNames(vs.names, m.Vary) {
		keys := map[string]struct{}{}
		if vs != nil {
			keys = vs.keys // variants stored under the old Vary stay purgeable by URL
		}
		vs = &variantSet{names: m.Vary, keys: keys}
		e.variants[m.Primary] = vs
	}
	vs.keys[m.Key] = struct{}{}
}

func equalNames(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// keysOf returns every stored key of a URL: the primary key and any variants.
func (e *Edge) keysOf(primary string) []string {
	keys := []string{primary}
	e.variantsMu.Lock()
	if vs := e.variants[primary]; vs != nil {
		for k := range vs.keys {
			keys = append(keys, k)
		}
		delete(e.variants, primary)
	}
	e.variantsMu.Unlock()
	return e.withCoded(keys)
}

// variantKeys returns the keys a URL may be stored under: the primary key and the variant keys
// of the variant index, which stays as it is.
func (e *Edge) variantKeys(primary string) []string {
	keys := []string{primary}
	e.variantsMu.RLock()
	if vs := e.variants[primary]; vs != nil {
		for k := range vs.keys {
			keys = append(keys, k)
		}
	}
	e.variantsMu.RUnlock()
	return e.withCoded(keys)
}

// invalidate removes every variant of a URL (RFC 9111 4.4), and keeps a fetch of it in flight
// from storing its response.
func (e *Edge) invalidate(primary string) int {
	e.markPurged(func(p string, _ []string) bool { return p == primary }, false)
	n := 0
	for _, k := range e.keysOf(primary) {
		if _, ok := e.store.Peek(k); ok {
			n++
		}
		e.store.Delete(k)
	}
	return n
}

// serveUnsafe forwards a request with an unsafe (or unknown) method and, when upstream answers
// with a non-error status, invalidates the target URI and the same-origin Location and
// Content-Location URIs (RFC 9111 4.4).
func (e *Edge) serveUnsafe(w http.ResponseWriter, r *http.Request) {
	status := e.passThrough(w, r)
	if status < 200 || status >= 400 {
		return
	}
	e.invalidate(e.primaryKey(r.Host, r.URL.RequestURI()))
	for _, name := range []string{"Location", "Content-Location"} {
		v := w.Header().Get(name)
		if v == "" {
			continue
		}
		u, err := r.URL.Parse(v)
		if err != nil || (u.Host != "" && !strings.EqualFold(u.Host, r.Host)) {
			continue // another origin's URI is not ours to invalidate
		}
		e.invalidate(e.primaryKey(r.Host, u.RequestURI()))
	}
}

// passThrough sends a request upstream without the cache and copies the response to the client.
// It returns the status sent (502 when upstream failed).
func (e *Edge) passThrough(w http.ResponseWriter, r *http.Request) int {
	e.stats.count(Bypass)
	ctx, cancel := context.WithTimeout(withInterim(r.Context(), interimForwarder(w, r)), time.Duration(e.cfg.FetchTimeout))
	defer cancel()
	out := e.upstreamRequest(ctx, r, r.Method, r.Body)
	out.ContentLength = r.ContentLength
	resp, err := e.fetchUpstream(out)
	if err != nil {
		e.warn("pass to upstream failed", "url", r.URL.String(), "err", err)
		writeError(w, http.StatusBadGateway, Bypass, msgBadGateway)
		return http.StatusBadGateway
	}
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	addVia(w.Header())
	setCacheHeaders(w.Header(), Bypass, parseAge(resp.Header))
	w.WriteHeader(resp.StatusCode)
	if r.Method != http.MethodHead {
		n, _ := copyBody(w, resp.Body)
		e.stats.OriginBytes.Add(n)
	}
	return resp.StatusCode
}

// upstreamRequest builds the request sent upstream for client request r: same URI and Host,
// end-to-end headers only, the forwarding fields set by the edge and the override fields
// stripped (edge/requestheaders.go).
func (e *Edge) upstreamRequest(ctx context.Context, r *http.Request, method string, body interface {
	Read([]byte) (int, error)
	Close() error
}) *http.Request {
	out := (&http.Request{
		Method:     method,
		URL:        &url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery},
		Header:     make(http.Header, len(r.Header)+2),
		Host:       r.Host,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
	}).WithContext(ctx)
	if body != nil && method != http.MethodGet && method != http.MethodHead {
		out.Body = body
	}
	copyHeader(out.Header, r.Header)
	e.forwardingFields(out.Header, r) // edge/requestheaders.go
	return out
}

// viaValue is the edge's Via entry, added to requests it forwards and to responses it returns
// (RFC 9110 7.6.3).
const viaValue = "1.1 switchyard-edge"

// addVia appends the edge's Via entry to a response header unless it is already the last one.
func addVia(h http.Header) {
	vv := h["Via"]
	if len(vv) > 0 && vv[len(vv)-1] == viaValue {
		return
	}
	h["Via"] = append(vv[:len(vv):len(vv)], viaValue) // never write into a shared backing array
}

// hopByHop are the header fields that describe one connection and are never forwarded or stored.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// copyHeader copies src to dst without hop-by-hop fields (including those Connection names).
func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		dst[k] = append([]string(nil), vv...)
	}
	for _, c := range src.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			dst.Del(strings.TrimSpace(f))
		}
	}
	for _, h := range hopByHop {
		dst.Del(h)
	}
}

// Error bodies are fixed texts: an upstream error's text (Go's transport names internal states,
// addresses and the origin's malformed bytes) goes to the log, never to a client.
const (
	msgBadGateway  = "bad gateway: the upstream response could not be used; retry later"
	msgUnavailable = "service unavailable: the cache cannot read its storage; retry later"
	msgConnect     = "method not allowed: the edge does not tunnel CONNECT; send requests for its origin"
	msgBadPath     = "bad request: the path holds %2F, %5C, a backslash or NUL, or does not start with /, which an origin may read differently from the cache; send a plain absolute path"
)

// writeError answers with a short plain-text error, still labelled with X-Cache and Age. msg is
// one of the fixed texts above (or another constant), never an error's text.
func writeError(w http.ResponseWriter, status int, label, msg string) {
	h := w.Header()
	for k := range h {
		delete(h, k)
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	setCacheHeaders(h, label, 0)
	if status == http.StatusMethodNotAllowed {
		h.Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS") // RFC 9110 15.5.6: required
	}
	w.WriteHeader(status)
	fmt.Fprintln(w, msg)
}
