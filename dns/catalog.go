package dns

import (
	"maps"
	"slices"
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
	var members []config.CatalogMember
	if cfg.Catalog != nil {
		members = cfg.CatalogMembers()
		for _, src := range cfg.Catalogs {
			members = append(members, config.CatalogMember{Zone: src.Zone})
			for _, m := range s.catalogMembers[src.Zone] {
				members = append(members, config.CatalogMember{Zone: m.Zone})
			}
		}
	}
	recs := cfg.CatalogRecords(members)
	if s.catalogSerial == 0 || !slices.Equal(recs, s.catalogRecords) {
		// The time in seconds, or one past the last serial: it only grows (RFC 1982 aside).
		s.catalogSerial = max(s.catalogSerial+1, uint32(time.Now().Unix()))
		s.catalogRecords = recs
	}
	return cfg.WithCatalogs(recs, s.catalogSerial, s.catalogMembers)
}

// catalogMembers reads a consumed catalog's member zones: the PTR targets under
// zones.<catalog> (RFC 9432 4.1), sorted, with their group and coo properties (4.4); ok false
// for a catalog that is not of version 2 (or 1, read alike), which is then not followed.
func catalogMembers(z *zone.Zone) (members []config.CatalogMember, ok bool) {
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
		p, isPTR := rr.(*mdns.PTR)
		owner := strings.ToLower(rr.Header().Name)
		// A member's own PTR is at <id>.zones.<catalog>, one label above the suffix.
		if !isPTR || !strings.HasSuffix(owner, suffix) || strings.Contains(strings.TrimSuffix(owner, suffix), ".") {
			continue
		}
		m := config.CatalogMember{Zone: strings.ToLower(mdns.Fqdn(p.Ptr))}
		for _, g := range z.RRset("group."+owner, mdns.TypeTXT) {
			m.Groups = append(m.Groups, strings.Join(g.(*mdns.TXT).Txt, ""))
		}
		slices.Sort(m.Groups)
		// A coo of more than one PTR is a broken property (RFC 9432 4.4.1): it hands nothing.
		if coo := z.RRset("coo."+owner, mdns.TypePTR); len(coo) == 1 {
			m.COO = strings.ToLower(mdns.Fqdn(coo[0].(*mdns.PTR).Ptr))
		}
		members = append(members, m)
	}
	slices.SortFunc(members, func(a, b config.CatalogMember) int { return strings.Compare(a.Zone, b.Zone) })
	return slices.CompactFunc(members, func(a, b config.CatalogMember) bool { return a.Zone == b.Zone }), true
}

// followCatalogs reads the consumed catalogs' copies in st and, when a catalog's members or
// their properties changed, rebuilds the state from its base with them (s.mu held; the server
// has started).
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
		if !slices.EqualFunc(members, s.catalogListed[src.Zone], config.CatalogMember.Equal) {
			s.log.Info("dns catalog members changed", "catalog", src.Zone, "members", len(members),
				"before", len(s.catalogListed[src.Zone]))
			s.catalogListed[src.Zone] = members
			changed = true
		}
	}
	if !changed {
		return
	}
	owners := s.assignOwners(st.base.Catalogs)
	if !maps.Equal(owners, s.catalogOwner) {
		s.saveCatalogOwners(st.base, owners)
	}
	s.catalogOwner = owners
	s.catalogMembers = map[string][]config.CatalogMember{}
	for _, src := range st.base.Catalogs {
		for _, m := range s.catalogListed[src.Zone] {
			if s.catalogOwner[m.Zone] == src.Zone {
				s.catalogMembers[src.Zone] = append(s.catalogMembers[src.Zone], m)
			}
		}
	}
	if err := s.reloadLocked(st.base); err != nil {
		s.log.Error("dns catalog members not applied", "err", err)
	}
}

// assignOwners decides which consumed catalog each listed member zone is served from (RFC
// 9432 5.4 and 4.4.1): the catalog that owns it keeps it while it lists it, a zone no catalog
// owns goes to the first in the configuration that lists it, and then a zone moves to the
// catalog its owner's coo property names when that catalog lists it too (so a restart whose
// saved owners are lost ends where the moves went). The owners are saved (catalogowners.go).
func (s *Server) assignOwners(sources []config.CatalogSource) map[string]string {
	lists := func(cat, zone string) (config.CatalogMember, bool) {
		i := slices.IndexFunc(s.catalogListed[cat], func(m config.CatalogMember) bool { return m.Zone == zone })
		if i < 0 {
			return config.CatalogMember{}, false
		}
		return s.catalogListed[cat][i], true
	}
	owners := map[string]string{}
	for zone, cat := range s.catalogOwner {
		if _, ok := lists(cat, zone); ok {
			owners[zone] = cat
		}
	}
	for _, src := range sources {
		for _, m := range s.catalogListed[src.Zone] {
			if cur, ok := owners[m.Zone]; !ok {
				owners[m.Zone] = src.Zone
			} else if cur != src.Zone && s.catalogOwner[m.Zone] == cur {
				s.log.Warn("dns catalog member listed by two catalogs: kept in its owner's (RFC 9432 5.4)", "zone", m.Zone, "owner", cur, "ignored", src.Zone)
			}
		}
	}
	for zone, cat := range owners {
		for range sources { // a chain of moves, at most one per catalog
			m, _ := lists(cat, zone)
			if _, listed := lists(m.COO, zone); m.COO == "" || m.COO == cat || !listed {
				break
			}
			s.log.Info("dns catalog member moves by its coo property", "zone", zone, "from", cat, "to", m.COO)
			cat = m.COO
		}
		owners[zone] = cat
	}
	return owners
}
