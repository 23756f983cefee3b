package dns

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/geoip"
	"github.com/switchyard/switchyard/dns/policy"
)

// geoDBs are the geolocation databases open in a server, by path. A database outlives the
// reloads that keep its path (its file is read once, and then again only when it changes);
// each has a watcher while the server runs.
type geoDBs struct {
	open     map[string]*geoip.DB
	watching map[string]context.CancelFunc
	reloads  *prometheus.CounterVec
	build    *prometheus.GaugeVec
}

func newGeoDBs(r prometheus.Registerer) (*geoDBs, error) {
	g := &geoDBs{open: map[string]*geoip.DB{}, watching: map[string]context.CancelFunc{},
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_dns_geo_reloads_total",
			Help: "Geolocation database files read again after a change, by database path and result (ok; error: the old one serves on)."},
			[]string{"database", "result"}),
		build: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "switchyard_dns_geo_database_build_timestamp_seconds",
			Help: "Build time (Unix seconds, from its metadata) of each geolocation database serving."}, []string{"database"})}
	for _, c := range []prometheus.Collector{g.reloads, g.build} {
		if err := r.Register(c); err != nil {
			return nil, fmt.Errorf("register dns geo metrics: %w", err)
		}
	}
	return g, nil
}

// groups compiles cfg's client groups over its databases, opening those not open yet. The
// caller holds s.mu (or is NewServer).
func (s *Server) groups(cfg *config.Config) (*policy.Groups, error) {
	var db, asn policy.Locator
	if g := cfg.GeoDB; g != nil {
		var err error
		if db, err = s.geoOpen(cfg.Path(g.Database)); err != nil {
			return nil, err
		}
		if asn, err = s.geoOpen(cfg.Path(g.ASNDatabase)); err != nil {
			return nil, err
		}
	}
	return policy.NewGroups(cfg.Groups, db, asn)
}

// geoOpen returns the database at path, opened now or kept from before; nil for no path. A
// typed nil would be a non-nil Locator, hence the explicit return.
func (s *Server) geoOpen(path string) (policy.Locator, error) {
	if path == "" {
		return nil, nil
	}
	if db := s.geo.open[path]; db != nil {
		return db, nil
	}
	db, err := geoip.Open(path)
	if err != nil {
		return nil, fmt.Errorf("field geo: %w", err)
	}
	s.geo.open[path] = db
	s.geo.build.WithLabelValues(path).Set(float64(db.BuildTime().Unix()))
	return db, nil
}

// watchGeo runs a watcher for each database cfg uses and stops (and forgets) the others. The
// caller holds s.mu and the server is serving.
func (s *Server) watchGeo(cfg *config.Config) {
	used := map[string]bool{}
	if g := cfg.GeoDB; g != nil {
		used[cfg.Path(g.Database)], used[cfg.Path(g.ASNDatabase)] = true, true
	}
	for path, db := range s.geo.open {
		switch {
		case !used[path]:
			if stop := s.geo.watching[path]; stop != nil {
				stop()
			}
			delete(s.geo.watching, path)
			delete(s.geo.open, path)
			s.geo.build.DeleteLabelValues(path)
		case s.geo.watching[path] == nil && s.serveCtx != nil:
			ctx, cancel := context.WithCancel(s.serveCtx)
			s.geo.watching[path] = cancel
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				db.Watch(ctx, cfg.GeoDB.Interval(), s.log, func(err error) { s.geoReloaded(db, err) })
			}()
		}
	}
}

// geoReloaded counts a database reload; a new version makes the cached client-dependent
// answers stale, as a health change does.
func (s *Server) geoReloaded(db *geoip.DB, err error) {
	if err != nil {
		s.geo.reloads.WithLabelValues(db.Path(), "error").Inc()
		return
	}
	s.geo.reloads.WithLabelValues(db.Path(), "ok").Inc()
	s.geo.build.WithLabelValues(db.Path()).Set(float64(db.BuildTime().Unix()))
	s.healthGen.Add(1)
}
