package edge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard/switchyard/edge/cachecontrol"
	"github.com/switchyard/switchyard/edge/store"
	"github.com/switchyard/switchyard/internal/adminauth"
)

// PurgeRequest selects entries to purge. Soft purges mark entries stale (they may still be served
// stale, for grace or stale-if-error, and are revalidated before being served fresh); hard purges
// remove them.
type PurgeRequest struct {
	// URLs are absolute URLs ("http://host/path?q") whose every variant is purged.
	URLs []string `json:"urls,omitempty"`
	// Prefixes are absolute URL prefixes ("http://host/static/").
	Prefixes []string `json:"prefixes,omitempty"`
	// Tags match Surrogate-Key and Cache-Tag values of stored responses.
	Tags []string `json:"tags,omitempty"`
	// Soft marks entries stale instead of removing them.
	Soft bool `json:"soft,omitempty"`
	// Fleet sends the purge on to every member of the edge's fleet (admin.fleet) once applied
	// here; GET /purge/{job} follows it.
	Fleet bool `json:"fleet,omitempty"`
}

// PurgeResult says how many entries a purge touched.
type PurgeResult struct {
	// Purged is the number of entries (variants) removed or marked stale.
	Purged int `json:"purged"`
	// Examined is the number of stored entries the purge looked at: the variants of each URL,
	// the entries carrying each tag, and every entry when prefixes are given.
	Examined int `json:"examined"`
	// Job is a fleet purge's id (GET /purge/{job}).
	Job string `json:"job,omitempty"`
}

// PushRequest lists URLs to prewarm. Each edge fetches them from its upstream unless it already
// holds a fresh copy (or Refresh is set), so common objects are in place before the first user.
type PushRequest struct {
	// URLs are absolute URLs; their host becomes the Host header, as a client's request would.
	URLs []string `json:"urls"`
	// Refresh fetches even when a fresh copy is stored (after an update at the origin).
	Refresh bool `json:"refresh,omitempty"`
}

// PushResult reports one pushed URL.
type PushResult struct {
	// URL is the pushed URL.
	URL string `json:"url"`
	// Status is the status the edge got for it (200 when stored or already fresh).
	Status int `json:"status,omitempty"`
	// Cache is the X-Cache of the prewarm fetch: MISS (fetched), HIT (already fresh), ...
	Cache string `json:"cache,omitempty"`
	// Error says why the URL could not be pushed.
	Error string `json:"error,omitempty"`
	// Peer is the admin address of the edge this result is from, for forwarded pushes.
	Peer string `json:"peer,omitempty"`
	// Forwarded are the results of the edges a pushed object was forwarded to (admin.push_to),
	// each with its own forwards.
	Forwarded []PushResult `json:"forwarded,omitempty"`
}

// PrefetchHeader is sent upstream on fetches made for a push, so an origin can tell pushed
// copies from pulled ones (the propagation experiment counts them apart).
const PrefetchHeader = "X-Switchyard-Prefetch"

// keyOfURL turns an absolute URL into a primary key, as a request for it would have.
func (e *Edge) keyOfURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%q is not an absolute URL; write it like http://www.example.com/path", raw)
	}
	return e.primaryKey(u.Host, u.RequestURI()), nil
}

// Purge removes or soft-purges the selected entries.
func (e *Edge) Purge(p PurgeRequest) (PurgeResult, error) {
	var keys []string
	for _, raw := range p.URLs {
		k, err := e.keyOfURL(raw)
		if err != nil {
			return PurgeResult{}, fmt.Errorf("purge: %w", err)
		}
		keys = append(keys, k)
	}
	var prefixes []string
	for _, raw := range p.Prefixes {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return PurgeResult{}, fmt.Errorf("purge: prefix %q is not an absolute URL; write it like http://www.example.com/static/", raw)
		}
		prefixes = append(prefixes, strings.ToLower(u.Host)+u.RequestURI())
	}
	match := func(primary string, tags []string) bool {
		return slices.Contains(keys, primary) ||
			slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(primary, p) }) ||
			slices.ContainsFunc(tags, func(t string) bool { return slices.Contains(p.Tags, t) })
	}
	e.markPurged(match, p.Soft)
	hit, examined := e.purgeTargets(keys, prefixes, p.Tags)
	n := 0
	for _, m := range hit {
		if p.Soft {
			c := m.Clone()
			c.Invalid = true
			if err := e.store.Update(c); err != nil {
				return PurgeResult{Purged: n, Examined: examined}, fmt.Errorf("soft purge %s: %w", m.Key, err)
			}
		} else {
			e.store.Delete(m.Key)
			if len(m.Vary) == 0 {
				e.keysOf(m.Primary) // forget its variant set too
			}
		}
		n++
	}
	if !p.Soft {
		for _, k := range keys {
			e.keysOf(k) // every variant of a purged URL is gone: forget the set
		}
	}
	e.stats.Purged.Add(int64(n))
	return PurgeResult{Purged: n, Examined: examined}, nil
}

// purgeTargets collects the stored entries a purge selects (before changing any: the indexes
// are not modified while they are read) and how many entries it examined. A URL costs its
// variants (the primary key and the keys of the edge's variant index), a tag the entries that
// carry it (the store's tag index); only prefixes scan the whole store.
func (e *Edge) purgeTargets(primaries, prefixes, tags []string) ([]*store.Meta, int) {
	var hit []*store.Meta
	seen := map[string]bool{}
	examined := 0
	add := func(m *store.Meta) {
		examined++
		if !seen[m.Key] {
			seen[m.Key] = true
			hit = append(hit, m)
		}
	}
	for _, primary := range primaries {
		for _, k := range e.variantKeys(primary) {
			if m, ok := e.store.Peek(k); ok {
				add(m)
			}
		}
	}
	for _, tag := range tags {
		e.store.Tagged(tag, func(m *store.Meta) bool { add(m); return true })
	}
	if len(prefixes) > 0 {
		e.store.All(func(m *store.Meta) bool {
			examined++
			if slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(m.Primary, p) }) && !seen[m.Key] {
				seen[m.Key] = true
				hit = append(hit, m)
			}
			return true
		})
	}
	return hit, examined
}

// Push prewarms URLs: each one is requested through the edge's own cache path, so a stored fresh
// copy is kept and a miss is fetched once (collapsed with any client fetching it too).
func (e *Edge) Push(p PushRequest) []PushResult {
	out := make([]PushResult, 0, len(p.URLs))
	for _, raw := range p.URLs {
		res := PushResult{URL: raw}
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			res.Error = fmt.Sprintf("%q is not an absolute URL; write it like http://www.example.com/app.js", raw)
			out = append(out, res)
			continue
		}
		r := httptest.NewRequest(http.MethodGet, u.RequestURI(), nil)
		r.Host = u.Host
		r.RemoteAddr = "127.0.0.1:0"
		r.Header.Set(PrefetchHeader, "1")
		if p.Refresh {
			r.Header.Set("Cache-Control", "no-cache") // revalidate (or refetch) whatever is stored
		}
		rec := httptest.NewRecorder()
		if err := e.serveRecorded(rec, r); err != nil {
			res.Error = err.Error()
			out = append(out, res)
			continue
		}
		res.Status, res.Cache = rec.Code, rec.Header().Get("X-Cache")
		if res.Cache == Miss || res.Cache == Revalidated {
			e.stats.Pushed.Add(1)
		}
		out = append(out, res)
	}
	return out
}

// serveRecorded runs the cache path for an internal request. A response aborted mid-body (the
// origin failed while sending it) panics with http.ErrAbortHandler, which net/http recovers for
// client requests; here it becomes an error.
func (e *Edge) serveRecorded(rec *httptest.ResponseRecorder, r *http.Request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				panic(p)
			}
			err = fmt.Errorf("push %s: upstream body ended early", r.URL.Path)
		}
	}()
	e.serveCacheable(rec, r)
	return nil
}

// StatsReport is the body of GET /stats.
type StatsReport struct {
	// Counters are the Stats counters by name, plus hit_ratio.
	Counters map[string]float64 `json:"counters"`
	// Objects is the number of stored entries.
	Objects int `json:"objects"`
	// MemoryBytes is the weighted size of the memory tier.
	MemoryBytes uint64 `json:"memory_bytes"`
	// DiskBytes is the weighted size of the disk tier.
	DiskBytes uint64 `json:"disk_bytes"`
	// Tiers are the upper-tier candidates' last measurements.
	Tiers []TierStatus `json:"tiers,omitempty"`
	// Origins are the tiered-cache analytics per origin (edge/tierstats.go).
	Origins []OriginStats `json:"origins,omitempty"`
}

// Report returns the stats report.
func (e *Edge) Report() StatsReport {
	m, d := e.store.Bytes()
	return StatsReport{Counters: e.stats.Snapshot(), Objects: e.store.Len(), MemoryBytes: m, DiskBytes: d, Tiers: e.Tiers(), Origins: e.OriginStats()}
}

// AdminHandler serves the admin API: POST /purge, POST /push, GET /stats (bearer token
// required) and GET /metrics (Prometheus, open like any scrape target).
func (e *Edge) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /purge", e.authed(func(w http.ResponseWriter, r *http.Request) {
		var p PurgeRequest
		if !decodeJSON(w, r, &p) {
			return
		}
		if p.Fleet && e.fleet == nil {
			http.Error(w, "fleet purge on an edge without a fleet: configure admin.fleet (peers or store)", http.StatusBadRequest)
			return
		}
		res, err := e.Purge(p)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if p.Fleet {
			p.Fleet = false // each member applies it; none sends it on again
			if res.Job, err = e.fleet.start(p); err != nil {
				http.Error(w, "purged here, not sent to the fleet: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		writeJSON(w, res)
	}))
	mux.HandleFunc("GET /purge/{id}", e.authed(e.handleFleetStatus))
	mux.HandleFunc("POST /push", e.authed(func(w http.ResponseWriter, r *http.Request) {
		var p PushRequest
		if !decodeJSON(w, r, &p) {
			return
		}
		writeJSON(w, e.Push(p))
	}))
	mux.HandleFunc("PUT /object", e.authed(e.serveObjectPush)) // edge/pushobject.go
	mux.HandleFunc("GET /stats", e.authed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, e.Report())
	}))
	return mux
}

// authed requires "Authorization: Bearer <admin.token>" (internal/adminauth, as the L7's admin).
func (e *Edge) authed(h http.HandlerFunc) http.HandlerFunc {
	return adminauth.Require(func() string { return e.cfg.Admin.Token }, "switchyard-edge", h)
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "decode request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// Fresh reports whether the edge holds a fresh response for an absolute URL with no Vary
// (tests and experiments use it to check propagation without making a request).
func (e *Edge) Fresh(raw string) bool {
	k, err := e.keyOfURL(raw)
	if err != nil {
		return false
	}
	ent, ok, _ := e.store.Get(k)
	if !ok {
		return false
	}
	return cachecontrol.Decide(nil, ent.Meta.Directives, ent.Meta.Age(e.now()), lifetime(ent.Meta), 0) == cachecontrol.Fresh
}
