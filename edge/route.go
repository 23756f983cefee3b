package edge

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// OriginConfig is one origin chosen by the request's Host, with tiers of its own.
type OriginConfig struct {
	// Hosts are the Host values (case-insensitive; a port in the request is ignored when the
	// exact value is not listed) whose requests go to this origin.
	Hosts []string `yaml:"hosts"`
	// URL is the origin's base URL, e.g. "http://10.0.0.2:8080".
	URL string `yaml:"url"`
	// Tiers is this origin's tiered-cache topology.
	Tiers TierConfig `yaml:"tiers"`
	// CAFile is a PEM bundle of the authorities an https:// URL is verified against, instead of
	// the system's roots.
	CAFile string `yaml:"ca_file"`
	// Slice stores this origin's large objects in fixed slices (edge/slice.go); nil: whole
	// objects.
	Slice *SliceConfig `yaml:"slice"`
}

// Topologies (TierConfig.Topology).
const (
	// TopologyNone sends misses to the origin directly.
	TopologyNone = "none"
	// TopologySmart sends misses through the candidate with the lowest latency to the origin,
	// as the candidates measure it, with the second lowest as fallback (Cloudflare's Smart
	// Tiered Cache Topology).
	TopologySmart = "smart"
	// TopologyGeneric spreads misses over the candidates by a hash of the URL (rendezvous
	// hashing: every edge picks the same tier for a URL; the next in the URL's order is the
	// fallback).
	TopologyGeneric = "generic"
	// TopologyCustom sends misses through Upper in the order given.
	TopologyCustom = "custom"
)

// validate fills a tier section's defaults and checks it; at is its field path.
func (t *TierConfig) validate(at string) error {
	if t.Token != "" && at != "tiers" {
		return &fieldError{at + ".token", "the tier token is edge-wide; set it once as the top-level tiers.token"}
	}
	if t.PlaintextToken && at != "tiers" {
		return &fieldError{at + ".plaintext_token", "the tier token is edge-wide; set plaintext_token once beside the top-level tiers.token"}
	}
	if (t.ClientCert != "" || t.ClientKey != "" || t.ClientCAFile != "") && at != "tiers" {
		return &fieldError{at, "client_cert, client_key and client_ca_file are edge-wide; set them once in the top-level tiers"}
	}
	for i, c := range t.Candidates {
		if err := checkBaseURL(c); err != nil {
			return &fieldError{at + ".candidates", fmt.Sprintf("entry %d: %v", i+1, err)}
		}
	}
	for i, c := range t.Upper {
		if err := checkBaseURL(c); err != nil {
			return &fieldError{at + ".upper", fmt.Sprintf("entry %d: %v", i+1, err)}
		}
	}
	switch t.Topology {
	case TopologyNone:
	case TopologySmart, TopologyGeneric:
		if len(t.Candidates) == 0 {
			return &fieldError{at + ".topology", t.Topology + " needs tiers.candidates: list the upper-tier edges' base URLs"}
		}
	case TopologyCustom:
		if len(t.Upper) == 0 {
			return &fieldError{at + ".topology", "custom needs tiers.upper: the upper tier's base URL, then its fallbacks"}
		}
	default:
		return &fieldError{at + ".topology", fmt.Sprintf("%q is not smart, generic, custom or none", t.Topology)}
	}
	return nil
}

// applyDefaults fills the topology (from which list is set) and the probe settings.
func (t *TierConfig) applyDefaults() {
	if t.Topology == "" {
		switch {
		case len(t.Upper) > 0:
			t.Topology = TopologyCustom
		case len(t.Candidates) > 0:
			t.Topology = TopologySmart
		default:
			t.Topology = TopologyNone
		}
	}
	if t.ProbeInterval == 0 {
		t.ProbeInterval = Duration(30 * time.Second)
	}
	if t.ProbeSamples <= 0 {
		t.ProbeSamples = 3
	}
}

// validateOrigins checks the origins list: a URL each, at least one host each, and no host
// claimed twice.
func (c *Config) validateOrigins() error {
	if c.Origin == "" && c.Tiers.Topology != TopologyNone {
		return &fieldError{"tiers", "applies to origin, which is not set; put tiers under the origins entry they are for"}
	}
	seen := map[string]int{}
	for i := range c.Origins {
		o := &c.Origins[i]
		at := "origins." + strconv.Itoa(i+1)
		if o.URL == "" {
			return &fieldError{at + ".url", "missing; set the origin's base URL, like http://10.0.0.2:8080"}
		}
		if err := checkBaseURL(o.URL); err != nil {
			return &fieldError{at + ".url", err.Error()}
		}
		if len(o.Hosts) == 0 {
			return &fieldError{at + ".hosts", "missing; list the Host names whose requests go to this origin"}
		}
		for _, h := range o.Hosts {
			k := strings.ToLower(strings.TrimSpace(h))
			if k == "" || strings.ContainsAny(k, "/ ") {
				return &fieldError{at + ".hosts", fmt.Sprintf("%q is not a host name; write it like www.example.com", h)}
			}
			if j, dup := seen[k]; dup {
				return &fieldError{at + ".hosts", fmt.Sprintf("%q is already served by origins entry %d; a host has one origin", h, j)}
			}
			seen[k] = i + 1
		}
		if err := o.Tiers.validate(at + ".tiers"); err != nil {
			return err
		}
		if err := o.Slice.validate(at+".slice", int64(c.Memory.MaxObjectBytes)); err != nil {
			return err
		}
	}
	return nil
}

// route is one origin and its tiers: where a miss for a host goes.
type route struct {
	// name identifies the origin in stats, metrics and RTT probes: its first host, or
	// "default" for the top-level origin.
	name     string
	origin   *url.URL
	topology string
	// tiers are the candidates (smart, generic) or the upper list (custom), each with its own
	// measurements for this origin.
	tiers    []*tier
	interval time.Duration
	samples  int
	// ranked is the smart topology's choice: primary, then fallback (nil until measured).
	ranked   rankedTiers
	counters tierCounters
	// slice is the origin's range slicing (edge/slice.go); nil: whole objects.
	slice *SliceConfig
	// rtt and rttAt are this edge's last measured latency to the origin, which it reports to
	// lower tiers (serveRTT); rttMu also keeps concurrent probes from measuring twice.
	rttMu sync.Mutex
	rtt   time.Duration
	rttAt time.Time
}

// defaultRoute is the name of the top-level origin's route.
const defaultRoute = "default"

func newRoute(name, origin string, tc TierConfig, sc *SliceConfig) (*route, error) {
	o, err := url.Parse(origin)
	if err != nil {
		return nil, fmt.Errorf("parse origin %q: %w", origin, err)
	}
	rt := &route{name: name, origin: o, topology: tc.Topology,
		interval: time.Duration(tc.ProbeInterval), samples: tc.ProbeSamples, slice: sc}
	list := tc.Candidates
	if tc.Topology == TopologyCustom {
		list = tc.Upper
	}
	if tc.Topology == TopologyNone {
		list = nil
	}
	for _, c := range list {
		b, err := url.Parse(c)
		if err != nil {
			return nil, fmt.Errorf("parse tier %q: %w", c, err)
		}
		rt.tiers = append(rt.tiers, &tier{base: b})
	}
	return rt, nil
}

// buildRoutes makes the default route (when Origin is set) and one per origins entry, indexed
// by lower-cased host.
func buildRoutes(cfg Config) (def *route, byHost map[string]*route, all []*route, err error) {
	byHost = map[string]*route{}
	if cfg.Origin != "" {
		if def, err = newRoute(defaultRoute, cfg.Origin, cfg.Tiers, cfg.Slice); err != nil {
			return nil, nil, nil, err
		}
		all = append(all, def)
	}
	for _, oc := range cfg.Origins {
		rt, err := newRoute(strings.ToLower(oc.Hosts[0]), oc.URL, oc.Tiers, oc.Slice)
		if err != nil {
			return nil, nil, nil, err
		}
		for _, h := range oc.Hosts {
			byHost[strings.ToLower(strings.TrimSpace(h))] = rt
		}
		all = append(all, rt)
	}
	return def, byHost, all, nil
}

// routeFor returns the route of a Host value: an exact (case-insensitive) match, then the host
// without its port, then the default route; nil when there is none.
func (u *upstream) routeFor(host string) *route {
	if len(u.byHost) > 0 {
		h := strings.ToLower(host)
		if rt := u.byHost[h]; rt != nil {
			return rt
		}
		if name, _, err := net.SplitHostPort(h); err == nil {
			if rt := u.byHost[name]; rt != nil {
				return rt
			}
		}
	}
	return u.def
}

// routeNamed returns the route a probe names (its first host, or "default"/"" for the
// top-level origin).
func (u *upstream) routeNamed(name string) *route {
	if name == "" || name == defaultRoute {
		return u.def
	}
	return u.routeFor(name)
}
