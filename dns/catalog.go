package dns

import (
	"slices"
	"sort"
	"strings"
	"time"

	mdns "github.com/miekg/dns"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/dns/zone"
)

// Catalog zones (RFC 9432; config/catalog.go). The configuration as loaded (state.base) is
// expanded at each build into the zones the server serves: the produced catalog, whose serial
// moves on only when its list of zones changes, and each consumed catalog with its members as
// secondary zones. A consumed catalog's new copy that changes its members rebuilds the state
// from the same base, as a reload does: members are added and removed without a restart.

// expand returns cfg with its catalogs as zones (s.mu held, or before the server starts).
func (s *Server) expand(cfg *config.Config) *config.Config {
	if cfg.Catalog == nil && len(cfg.Catalogs) == 0 {
		return cfg
	}
	var zones []string
	if cfg.Catalog != nil {
		for _, z := range cfg.Zones {
			zones = append(zones, z.Origin)
		}
		for _, src := range cfg.Catalogs {
			zones = append(zones, src.Zone)
			zones = append(zones, s.catalogMembers[src.Zone]...)
		}
	}
	recs := cfg.CatalogRecords(zones)
	if s.catalogSerial == 0 || !slices.Equal(recs, s.catalogRecords) {
		// The time in seconds, or one past the last serial: it only grows (RFC 1982 aside).
		s.catalogSerial = max(s.catalogSerial+1, uint32(time.Now().Unix()))
		s.catalogRecords = recs
	}
	return cfg.WithCatalogs(recs, s.catalogSerial, s.catalogMembers)
}

// catalogMembers reads a consumed catalog's member zones: the PTR targets under
// zones.<catalog> (RFC 9432 4.1), sorted; ok false for a catalog that is not of version 2 (or
// 1, read alike), which is then not followed.
func catalogMembers(z *zone.Zone) (members []string, ok bool) {
	for _, rr := range z.RRset("version."+z.Origin, mdns.TypeTXT) {
		if t, isTXT := rr.(*mdns.TXT); isTXT && len(t.Txt) == 1 && (t.Txt[0] == "2" || t.Txt[0] == "1") {
			ok = true
		}
	}
	if !ok {
		return nil, false
	}
	suffix := ".zones." + z.Origin
	for _, rr := range z.Records() {
		if p, isPTR := rr.(*mdns.PTR); isPTR && strings.HasSuffix(strings.ToLower(p.Hdr.Name), suffix) {
			members = append(members, strings.ToLower(mdns.Fqdn(p.Ptr)))
		}
	}
	sort.Strings(members)
	return slices.Compact(members), true
}

// followCatalogs reads the consumed catalogs' copies in st and, when a catalog's members
// changed, rebuilds the state from its base with them (s.mu held; the server has started).
func (s *Server) followCatalogs(st *state) {
	changed := false
	for _, src := range st.base.Catalogs {
		z := st.store.Find(src.Zone)
		if z == nil || z.Origin != src.Zone {
			continue // no copy yet
		}
		members, ok := catalogMembers(z)
		if !ok {
			s.log.Warn("dns catalog not followed: not a version 2 catalog (RFC 9432)", "catalog", src.Zone)
			continue
		}
		if !slices.Equal(members, s.catalogMembers[src.Zone]) {
			s.log.Info("dns catalog members changed", "catalog", src.Zone, "members", len(members),
				"before", len(s.catalogMembers[src.Zone]))
			s.catalogMembers[src.Zone] = members
			changed = true
		}
	}
	if changed {
		if err := s.reloadLocked(st.base); err != nil {
			s.log.Error("dns catalog members not applied", "err", err)
		}
	}
}
