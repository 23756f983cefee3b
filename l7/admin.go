package l7

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// RouteInfo describes one route for `switchyard l7 routes` and GET /routes.
type RouteInfo struct {
	Order   int      `json:"order"`
	Name    string   `json:"name"`
	Host    string   `json:"host,omitempty"`
	Path    string   `json:"path,omitempty"`
	Methods []string `json:"methods,omitempty"`
	Headers int      `json:"header_conditions,omitempty"`
	Query   int      `json:"query_conditions,omitempty"`
	Pool    string   `json:"pool"`
	Retries int      `json:"retries,omitempty"`
}

// BackendInfo describes one backend for `switchyard l7 backends` and GET /backends.
type BackendInfo struct {
	Pool     string `json:"pool"`
	Address  string `json:"address"`
	Weight   int    `json:"weight"`
	Healthy  bool   `json:"healthy"`
	Draining bool   `json:"draining"`
	Ejected  bool   `json:"ejected"`
	InFlight int64  `json:"in_flight"`
}

// Routes lists the routes in precedence order.
func Routes(cfg *Config) []RouteInfo {
	out := make([]RouteInfo, 0, len(cfg.Routes))
	for i, r := range cfg.Routes {
		ri := RouteInfo{Order: i + 1, Name: r.Name, Host: r.Match.Host, Methods: r.Match.Methods,
			Headers: len(r.Match.Headers), Query: len(r.Match.Query), Pool: r.Pool}
		if len(r.Pools) > 0 {
			parts := make([]string, len(r.Pools))
			for i, sp := range r.Pools {
				parts[i] = fmt.Sprintf("%s=%d", sp.Pool, sp.Weight)
			}
			ri.Pool = strings.Join(parts, " ") // the weighted split, e.g. "stable=90 canary=10"
		}
		if r.Filters != nil && r.Filters.Redirect != nil {
			ri.Pool = fmt.Sprintf("(redirect %d)", r.Filters.Redirect.code())
		}
		switch p := r.Match.Path; {
		case p.Exact != "":
			ri.Path = "= " + p.Exact
		case p.Prefix != "":
			ri.Path = p.Prefix + "*"
		case p.Regex != "":
			ri.Path = "~ " + p.Regex
		}
		if r.Retry != nil {
			ri.Retries = r.Retry.Attempts
		}
		out = append(out, ri)
	}
	return out
}

// Backends lists every backend with its live state, sorted by pool and address.
func (s *Server) Backends() []BackendInfo {
	st := s.state.Load()
	var out []BackendInfo
	for name, p := range st.pools {
		for _, b := range p.backends {
			out = append(out, BackendInfo{Pool: name, Address: b.Address, Weight: b.Weight, Healthy: b.Healthy(),
				Draining: b.Draining(), Ejected: b.Ejected(), InFlight: b.InFlight()})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pool != out[j].Pool {
			return out[i].Pool < out[j].Pool
		}
		return out[i].Address < out[j].Address
	})
	return out
}

// Drain stops (on) or resumes (!on) new requests to a backend; in-flight requests finish.
func (s *Server) Drain(poolName, address string, on bool) error {
	p := s.state.Load().pools[poolName]
	if p == nil {
		return fmt.Errorf("drain: unknown pool %q; see `switchyard l7 backends`", poolName)
	}
	for _, b := range p.backends {
		if b.Address == address {
			b.SetDraining(on)
			s.log.Info("backend drain", "pool", poolName, "backend", address, "draining", on)
			return nil
		}
	}
	return fmt.Errorf("drain: pool %q has no backend %q; see `switchyard l7 backends`", poolName, address)
}

// AdminHandler serves the admin API:
//
//	GET  /healthz                      liveness
//	GET  /metrics                      Prometheus metrics
//	GET  /routes                       route table (JSON)
//	GET  /backends                     backends and their state (JSON)
//	POST /drain?pool=P&backend=ADDR    drain a backend; add &undo=1 to put it back
//	POST /reload                       re-read the configuration file
//
// The POST endpoints need "Authorization: Bearer <admin.token>" (admin_auth.go).
func (s *Server) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /routes", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, Routes(s.Config())) })
	mux.HandleFunc("GET /backends", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.Backends()) })
	mux.HandleFunc("POST /drain", s.adminAuth(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if err := s.Drain(q.Get("pool"), q.Get("backend"), q.Get("undo") == ""); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		writeJSON(w, s.Backends())
	}))
	mux.HandleFunc("POST /reload", s.adminAuth(func(w http.ResponseWriter, _ *http.Request) {
		if err := s.ReloadFile(); err != nil {
			http.Error(w, err.Error()+" (the previous configuration stays in effect)", http.StatusUnprocessableEntity)
			return
		}
		fmt.Fprintln(w, "reloaded")
	}))
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
