package policy

import (
	"errors"
	"fmt"
)

// Spec is one dynamic name as configured, the part its policy reads: package config builds it
// from a name (config.Name.Spec) and calls Validate, and Compile builds the decisions from it.
type Spec struct {
	// FQDN is the absolute, lowercase name.
	FQDN string
	// TTL of the answers (seconds).
	TTL uint32
	// Policy is Geolocation, Latency, Weighted or Failover.
	Policy string
	// AllDown is what answers when every site is down: AllDownAnswerAll, else NODATA.
	AllDown string
	// Answers is how many records a weighted answer carries.
	Answers int
	// Sites are the name's sites, in configuration order.
	Sites []SiteSpec
	// Geo maps a client group (or "default") to a chain of sites (the geolocation policy).
	Geo map[string][]string
	// Latency maps a client group (or "default") to a site -> latency table (the latency policy).
	Latency map[string]map[string]float64
	// Chain is the failover order.
	Chain []string
}

// SiteSpec is one configured site of a name.
type SiteSpec struct {
	// Name identifies the site in the policy's tables.
	Name string
	// Addresses are the IPv4/IPv6 addresses answered for the site.
	Addresses []string
	// Weight is the weighted policy's target share.
	Weight float64
	// Coordinates are [latitude, longitude] in degrees, or empty.
	Coordinates []float64
}

// Validate checks the policy and its tables against the name's sites and the configuration's
// client groups (the top-level groups: group name to subnets). Errors name the field, for package
// config to prefix with the line and the name; the sites themselves are checked there.
func (s *Spec) Validate(groups map[string][]string) error {
	sites := make(map[string]bool, len(s.Sites))
	for _, site := range s.Sites {
		sites[site.Name] = true
		if c := site.Coordinates; len(c) > 0 {
			if len(c) != 2 || c[0] < -90 || c[0] > 90 || c[1] < -180 || c[1] > 180 {
				return fmt.Errorf("field sites.%s.coordinates: %v; write [latitude, longitude] in degrees, e.g. [50.11, 8.68]", site.Name, c)
			}
			if s.Policy != Geolocation {
				return fmt.Errorf("field sites.%s.coordinates: only the geolocation policy places clients by distance; remove them or use policy: geolocation", site.Name)
			}
		}
	}
	checkSites := func(field string, list []string) error {
		for _, site := range list {
			if !sites[site] {
				return fmt.Errorf("field %s: site %q is not among this name's sites", field, site)
			}
		}
		return nil
	}
	groupKnown := func(field, g string) error {
		if g == "default" {
			return nil
		}
		if _, ok := groups[g]; !ok {
			return fmt.Errorf("field %s: group %q is not defined under the top-level groups:", field, g)
		}
		return nil
	}
	switch s.Policy {
	case Geolocation:
		if len(s.Geo) == 0 {
			return errors.New("field geo: the geolocation policy needs a geo table (group -> [sites]) with a default")
		}
		if _, ok := s.Geo["default"]; !ok {
			return errors.New("field geo: no default entry; add `default: [site]` for clients outside every group")
		}
		for g, chain := range s.Geo {
			if err := groupKnown("geo."+g, g); err != nil {
				return err
			}
			if len(chain) == 0 {
				return fmt.Errorf("field geo.%s: empty chain; list at least one site", g)
			}
			if err := checkSites("geo."+g, chain); err != nil {
				return err
			}
		}
	case Latency:
		if len(s.Latency) == 0 {
			return errors.New("field latency: the latency policy needs a latency table (group -> site -> latency)")
		}
		for g, row := range s.Latency {
			if err := groupKnown("latency."+g, g); err != nil {
				return err
			}
			for site, v := range row {
				if !sites[site] {
					return fmt.Errorf("field latency.%s: site %q is not among this name's sites", g, site)
				}
				if v < 0 {
					return fmt.Errorf("field latency.%s.%s: negative latency %v", g, site, v)
				}
			}
		}
	case Weighted:
		total := 0.0
		for _, site := range s.Sites {
			if site.Weight < 0 {
				return fmt.Errorf("field sites.%s.weight: negative weight %v", site.Name, site.Weight)
			}
			total += site.Weight
		}
		if total == 0 {
			return errors.New("field weight: every site has weight 0; give the sites positive weights (target shares)")
		}
	case Failover:
		if len(s.Chain) == 0 {
			return errors.New("field chain: the failover policy needs a chain [primary, secondary, ...]")
		}
		if err := checkSites("chain", s.Chain); err != nil {
			return err
		}
	case "":
		return errors.New("field policy: missing; use geolocation, latency, weighted or failover")
	default:
		return fmt.Errorf("field policy: %q is unknown; use geolocation, latency, weighted or failover", s.Policy)
	}
	return nil
}
