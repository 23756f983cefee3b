// Package config reads the YAML configuration of the switchyard DNS stop: the zones it is
// authoritative for, their static records (inline or from RFC 1035 zone files), and the dynamic
// service names answered by a routing policy over health-checked sites. Errors name the line and
// the field, so an operator can fix the file without reading the code.
package config

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/dns/policy"
	"github.com/switchyard/switchyard/internal/yamlx"
)

// Policy names accepted in a dynamic name's `policy` field (package policy holds the policies
// and checks their tables: Name.Spec, policy.Spec.Validate).
const (
	PolicyGeolocation = policy.Geolocation
	PolicyLatency     = policy.Latency
	PolicyWeighted    = policy.Weighted
	PolicyFailover    = policy.Failover
)

// All-down behaviours accepted in `all_down`.
const (
	// AllDownFailClosed answers NODATA when every site of a name is down: clients fail fast
	// instead of being sent to dead addresses.
	AllDownFailClosed = "fail-closed"
	// AllDownAnswerAll answers with every site when all are down, on the theory that the health
	// checks may be wrong and some address is better than none.
	AllDownAnswerAll = policy.AllDownAnswerAll
)

// Config is the whole DNS stop configuration.
type Config struct {
	// Listen is the address:port the server binds for UDP and TCP (port 0 picks a free port).
	Listen string `yaml:"listen"`
	// QueryLog logs every query with log/slog at Info level when true.
	QueryLog bool `yaml:"query_log"`
	// QueryMetricsZones is the most zones whose queries switchyard_dns_queries_total counts per
	// zone (default 1000): a server with more counts its static zones' queries under name "*",
	// since a series per zone, type and rcode costs about 600 bytes a zone and a scrape of
	// megabytes at 100,000 zones. Dynamic names keep theirs.
	QueryMetricsZones int `yaml:"query_metrics_zones"`
	// MaxUDPSize caps the EDNS buffer size the server honours (default 1232, the DNS flag day value).
	MaxUDPSize int `yaml:"max_udp_size"`
	// RateLimit is the optional response-rate limit per client /24 (or /56); 0 disables it.
	RateLimit RateLimit `yaml:"rate_limit"`
	// Groups maps a client group name to what it covers: subnets (the longest matching prefix
	// wins) and database selectors country:DE, continent:EU, asn:64500 (geo.go); geolocation and
	// latency tables are keyed on groups.
	Groups map[string][]string `yaml:"groups"`
	// Zones are the zones the server is authoritative for.
	Zones []Zone `yaml:"zones"`
	// TSIGKeys are the shared secrets that authenticate zone transfers, NOTIFY and dynamic
	// updates (RFC 8945).
	TSIGKeys []TSIGKey `yaml:"tsig_keys"`
	// UDP tunes the UDP listener (udp.go).
	UDP UDP `yaml:"udp"`
	// StateDir is where the server keeps what it must find again after a restart: the copies
	// of secondary zones, the IXFR journals of zones without a file and the consumed catalogs'
	// member owners (catalog.owners). Relative to the
	// configuration file; empty is the configuration file's directory. The packaged unit sets
	// /var/lib/switchyard-dns (its StateDirectory).
	StateDir string `yaml:"state_dir"`
	// GeoDB is the geolocation databases the groups' selectors read (geo.go); nil: subnets only.
	GeoDB *GeoDB `yaml:"geo"`
	// TLS is the DNS over TLS listener, also serving transfers over TLS (tls.go); nil: none.
	TLS *TLS `yaml:"tls"`
	// Dnstap logs queries and responses to a dnstap reader (dnstap.go); nil logs none.
	Dnstap *Dnstap `yaml:"dnstap"`
	// Store is the etcd store (etcd://HOST:PORT[,...]/PREFIX or etcds://...) in which the zones
	// with a key policy keep their keys and rollover state, shared by a fleet (docs/dns.md "A
	// fleet's keys"); empty: each policy's key_dir.
	Store string `yaml:"store"`
	// StoreKeyFile is the 32-byte key (raw, or 64 hex characters) the private keys in Store are
	// encrypted with; every node of the fleet has the same copy. Relative to the configuration
	// file.
	StoreKeyFile string `yaml:"store_key_file"`
	// Catalog produces a catalog zone (RFC 9432) listing the zones served (catalog.go).
	Catalog *Catalog `yaml:"catalog"`
	// Catalogs are catalog zones taken from primaries, whose members are served as secondary
	// zones (catalog.go).
	Catalogs []CatalogSource `yaml:"catalogs"`

	// Dir is the directory of the configuration file; relative zone file paths resolve from it.
	Dir string `yaml:"-"`
	// expanded marks WithCatalogs' result: its zones' catalog fields were checked in the
	// configuration it came from.
	expanded bool
}

// RateLimit configures response-rate limiting (RRL) per client network.
type RateLimit struct {
	// ResponsesPerSecond is the sustained rate allowed per client network; 0 disables RRL.
	ResponsesPerSecond int `yaml:"responses_per_second"`
	// Slip answers every Nth limited query with a truncated response (so real clients retry over
	// TCP) instead of dropping it; 0 drops all limited queries.
	Slip int `yaml:"slip"`
}

// Zone is one zone of authority.
type Zone struct {
	// Origin is the zone apex, e.g. "example.com.".
	Origin string `yaml:"origin"`
	// TTL is the default TTL of records without one (seconds, default 300).
	TTL uint32 `yaml:"ttl"`
	// File is an RFC 1035 zone file with the static records; relative to the config file.
	File string `yaml:"file"`
	// Records are static records in zone-file syntax, names relative to Origin.
	Records []string `yaml:"records"`
	// SOA is used when neither File nor Records carry one.
	SOA *SOA `yaml:"soa"`
	// Names are the dynamic service names of this zone.
	Names []Name `yaml:"names"`
	// Transfer serves the zone to secondaries (AXFR, IXFR) and notifies them of changes; nil
	// refuses transfers.
	Transfer *Transfer `yaml:"transfer"`
	// DNSSEC signs the zone online (see DNSSEC); nil serves it unsigned.
	DNSSEC *DNSSEC `yaml:"dnssec"`
	// Update accepts RFC 2136 dynamic updates signed with the keys it allows (update.go); nil
	// refuses updates.
	Update *Update `yaml:"update"`
	// Secondary takes the zone from primaries by zone transfer instead of File and Records
	// (secondary.go); nil serves the zone's own data.
	Secondary *Secondary `yaml:"secondary"`
	// Catalog are the zone's properties in the catalog this server produces (group, coo;
	// catalog.go); nil lists it without any.
	Catalog *MemberProperties `yaml:"catalog"`
	// FromCatalog is the consumed catalog this zone is a member of ("" for a zone configured
	// as such; catalog.go).
	FromCatalog string `yaml:"-"`

	// Line is the line of the zone in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// SOA is a shorthand for the zone's start of authority.
type SOA struct {
	NS      string `yaml:"ns"`
	Mbox    string `yaml:"mbox"`
	Serial  uint32 `yaml:"serial"`
	Refresh uint32 `yaml:"refresh"`
	Retry   uint32 `yaml:"retry"`
	Expire  uint32 `yaml:"expire"`
	Minimum uint32 `yaml:"minimum"`
}

// Name is a dynamic service name answered by a routing policy over sites.
type Name struct {
	// Name is relative to the zone origin ("app") or absolute ("app.example.com.").
	Name string `yaml:"name"`
	// TTL of the answers (seconds); application names want it short, content names long.
	TTL uint32 `yaml:"ttl"`
	// Policy is one of geolocation, latency, weighted, failover.
	Policy string `yaml:"policy"`
	// AllDown is fail-closed (default) or answer-all.
	AllDown string `yaml:"all_down"`
	// Answers is how many records a weighted answer carries (default 1); more records let the
	// clients behind one large resolver spread over several sites.
	Answers int `yaml:"answers"`
	// Sites are the locations (data centres, points of presence) the name can resolve to.
	Sites []Site `yaml:"sites"`
	// Geo maps a client group (or "default") to a chain of sites: the first live one answers.
	Geo map[string][]string `yaml:"geo"`
	// Latency maps a client group (or "default") to a site -> latency table; the lowest live wins.
	// A value of 0 or an absent site means "use the measured health-check round trip".
	Latency map[string]map[string]float64 `yaml:"latency"`
	// Chain is the failover order: primary, then secondary sites.
	Chain []string `yaml:"chain"`
	// TransferFallback are the addresses a secondary receives for this name by zone transfer,
	// where no policy runs (see FallbackAddresses for the default).
	TransferFallback []string `yaml:"transfer_fallback"`

	// Line is the line of the name in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// Site is one location a dynamic name can point to.
type Site struct {
	// Name identifies the site in tables and metrics ("b34").
	Name string `yaml:"name"`
	// Addresses are the IPv4/IPv6 addresses answered for this site (A and AAAA records).
	Addresses []string `yaml:"addresses"`
	// Weight is the target share for the weighted policy (any positive scale).
	Weight float64 `yaml:"weight"`
	// Check is the health check of the site; absent means always up.
	Check *Check `yaml:"check"`
	// Coordinates are the site's [latitude, longitude]: geolocation sends a client located by
	// the geo database whose group has no chain to the nearest live site.
	Coordinates []float64 `yaml:"coordinates"`

	// Line is the line of the site in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// Check is a health check of a site's target.
type Check struct {
	// Type is tcp (connect) or http (GET, status compared with ExpectStatus).
	Type string `yaml:"type"`
	// Target is the address:port probed.
	Target string `yaml:"target"`
	// Path is the HTTP path (default /).
	Path string `yaml:"path"`
	// ExpectStatus is the HTTP status that counts as up (default: any 2xx or 3xx).
	ExpectStatus int `yaml:"expect_status"`
	// Interval between probes (default 1s).
	Interval Duration `yaml:"interval"`
	// Timeout of one probe (default: the interval, at most 2s).
	Timeout Duration `yaml:"timeout"`
	// Rise is the number of consecutive successes that bring a down site back (default 2).
	Rise int `yaml:"rise"`
	// Fall is the number of consecutive failures that take an up site out (default 3).
	Fall int `yaml:"fall"`
}

// Duration is a time.Duration written as "500ms", "30s" or "5m" in YAML (shared by every stop).
type Duration = yamlx.Duration

// UnmarshalYAML decodes a zone strictly and records its line.
func (z *Zone) UnmarshalYAML(n *yaml.Node) error {
	type plain Zone
	if err := strict(n, (*plain)(z)); err != nil {
		return err
	}
	z.Line = n.Line
	return nil
}

// UnmarshalYAML decodes a name strictly and records its line.
func (nm *Name) UnmarshalYAML(n *yaml.Node) error {
	type plain Name
	if err := strict(n, (*plain)(nm)); err != nil {
		return err
	}
	nm.Line = n.Line
	return nil
}

// UnmarshalYAML decodes a site strictly and records its line.
func (s *Site) UnmarshalYAML(n *yaml.Node) error {
	type plain Site
	if err := strict(n, (*plain)(s)); err != nil {
		return err
	}
	s.Line = n.Line
	return nil
}

// UnmarshalYAML decodes a check strictly.
func (c *Check) UnmarshalYAML(n *yaml.Node) error {
	type plain Check
	return strict(n, (*plain)(c))
}

// strict decodes a mapping node into v and rejects keys that are not yaml tags of v, because
// yaml.v3's KnownFields does not reach into custom unmarshalers and a typo ("wieght") would
// otherwise be silently ignored.
func strict(n *yaml.Node, v any) error {
	if n.Kind == yaml.MappingNode {
		known := map[string]bool{}
		var collect func(t reflect.Type)
		collect = func(t reflect.Type) {
			for i := 0; i < t.NumField(); i++ {
				tag, opts, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
				switch {
				case opts == "inline":
					collect(t.Field(i).Type) // an inlined struct's fields are this mapping's
				case tag != "" && tag != "-":
					known[tag] = true
				}
			}
		}
		collect(reflect.TypeOf(v).Elem())
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if !known[k.Value] {
				keys := make([]string, 0, len(known))
				for key := range known {
					keys = append(keys, key)
				}
				return fmt.Errorf("line %d: unknown field %q (known fields: %s)", k.Line, k.Value, strings.Join(sorted(keys), ", "))
			}
		}
	}
	return n.Decode(v)
}

// Load reads and validates a configuration file.
func Load(path string) (*Config, error) {
	b, err := yamlx.ReadFile(path) // bounded: yamlx.MaxFileBytes
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Dir = filepath.Dir(path)
	return c, nil
}

// Parse decodes a configuration from YAML bytes, fills its defaults (ApplyDefaults) and
// validates it (Validate).
func Parse(b []byte) (*Config, error) {
	var c Config
	if err := yamlx.Decode(b, &c); err != nil { // errors name the line, the field and the fix
		if errors.Is(err, io.EOF) {
			return nil, errors.New("parse config: the file is empty; it needs at least `zones:`")
		}
		return nil, fmt.Errorf("parse config: %w", err)
	}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func sorted(s []string) []string { slices.Sort(s); return s }

// ApplyDefaults fills every unset option, of the server, its zones, names and site checks. It
// is idempotent and keeps set values; call it before Validate (Parse does).
func (c *Config) ApplyDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:5353"
	}
	if c.MaxUDPSize == 0 {
		c.MaxUDPSize = 1232
	}
	if c.QueryMetricsZones == 0 {
		c.QueryMetricsZones = 1000
	}
	for i := range c.Zones {
		z := &c.Zones[i]
		if z.TTL == 0 {
			z.TTL = 300
		}
		for j := range z.Names {
			z.Names[j].applyDefaults()
		}
	}
}

// applyDefaults fills a name's TTL, all_down, answers and its sites' check settings.
func (n *Name) applyDefaults() {
	if n.TTL == 0 {
		n.TTL = 60
	}
	if n.AllDown == "" {
		n.AllDown = AllDownFailClosed
	}
	if n.Answers == 0 {
		n.Answers = 1
	}
	for i := range n.Sites {
		if c := n.Sites[i].Check; c != nil {
			c.applyDefaults()
		}
	}
}

// applyDefaults fills a site check's type, path, interval, timeout, rise and fall.
func (c *Check) applyDefaults() {
	if c.Type == "" {
		c.Type = "tcp"
	}
	if c.Path == "" {
		c.Path = "/"
	}
	if c.Interval == 0 {
		c.Interval = Duration(time.Second)
	}
	if c.Timeout == 0 {
		c.Timeout = min(c.Interval, Duration(2*time.Second))
	}
	if c.Rise == 0 {
		c.Rise = 2
	}
	if c.Fall == 0 {
		c.Fall = 3
	}
}

// Validate checks a configuration ApplyDefaults has filled and puts zone origins and names in
// canonical form (lowercase, absolute); it returns the first problem with its line and field.
func (c *Config) Validate() error {
	if c.MaxUDPSize < 512 || c.MaxUDPSize > 65535 {
		return fmt.Errorf("field max_udp_size: %d is out of range; use 512..65535 (1232 is the usual value)", c.MaxUDPSize)
	}
	if c.RateLimit.ResponsesPerSecond < 0 || c.RateLimit.Slip < 0 {
		return errors.New("field rate_limit: responses_per_second and slip must be >= 0")
	}
	if c.QueryMetricsZones < 0 {
		return fmt.Errorf("field query_metrics_zones: %d: must be > 0 (the most zones counted one by one; 0 or unset: 1000)", c.QueryMetricsZones)
	}
	if err := c.UDP.validate(); err != nil {
		return err
	}
	if err := c.validateDnstap(); err != nil {
		return err
	}
	if err := c.validateTLS(); err != nil {
		return err
	}
	if err := c.validateGroups(); err != nil {
		return err
	}
	if len(c.Zones) == 0 && len(c.Catalogs) == 0 {
		return errors.New("field zones: no zone configured; add at least one zone with an origin (or a catalogs entry)")
	}
	if err := c.validateKeys(); err != nil {
		return err
	}
	if err := c.validateStore(); err != nil {
		return err
	}
	if err := c.validateCatalogs(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i := range c.Zones {
		z := &c.Zones[i]
		if err := c.validateZone(z); err != nil {
			return err
		}
		if err := c.validateTransfer(z); err != nil {
			return err
		}
		if err := c.validateDNSSEC(z); err != nil {
			return err
		}
		if err := c.validateUpdate(z); err != nil {
			return err
		}
		if err := c.validateSecondary(z); err != nil {
			return err
		}
		if seen[z.Origin] {
			return fmt.Errorf("line %d: field zones[%d].origin: zone %s is configured twice", z.Line, i, z.Origin)
		}
		seen[z.Origin] = true
	}
	return nil
}

func (c *Config) validateZone(z *Zone) error {
	if z.Origin == "" {
		return fmt.Errorf("line %d: field origin: missing; set it to the zone apex, e.g. example.com.", z.Line)
	}
	// Written only when it changes: a server validates its loaded configuration again on a
	// reload, whose zones a running state may be reading (SharingZones).
	if o := strings.ToLower(z.Origin); o != z.Origin {
		z.Origin = o
	}
	if !strings.HasSuffix(z.Origin, ".") {
		z.Origin += "."
	}
	names := map[string]bool{}
	for i := range z.Names {
		n := &z.Names[i]
		if err := c.validateName(z, n); err != nil {
			return fmt.Errorf("line %d: zone %s name %q: %w", n.Line, z.Origin, n.Name, err)
		}
		if names[n.Name] {
			return fmt.Errorf("line %d: zone %s: dynamic name %s is configured twice", n.Line, z.Origin, n.Name)
		}
		names[n.Name] = true
	}
	return nil
}

// Absolute returns name made absolute against origin, lowercased.
func Absolute(name, origin string) string {
	name = strings.ToLower(name)
	switch {
	case name == "@" || name == "":
		return origin
	case strings.HasSuffix(name, "."):
		return name
	default:
		return name + "." + origin
	}
}

// validateName makes a name absolute and checks it.
func (c *Config) validateName(z *Zone, n *Name) error {
	if n.Name == "" {
		return errors.New("field name: missing; give the service name, e.g. app")
	}
	n.Name = Absolute(n.Name, z.Origin)
	if !strings.HasSuffix(n.Name, z.Origin) {
		return fmt.Errorf("field name: %s is outside zone %s; use a name under the origin", n.Name, z.Origin)
	}
	if n.AllDown != AllDownFailClosed && n.AllDown != AllDownAnswerAll {
		return fmt.Errorf("field all_down: %q is unknown; use fail-closed or answer-all", n.AllDown)
	}
	if n.Answers < 0 {
		return fmt.Errorf("field answers: %d must be positive", n.Answers)
	}
	if len(n.Sites) == 0 {
		return errors.New("field sites: no site; add at least one site with addresses")
	}
	sites := map[string]bool{}
	for i := range n.Sites {
		s := &n.Sites[i]
		if err := validateSite(s); err != nil {
			return fmt.Errorf("line %d: site %q: %w", s.Line, s.Name, err)
		}
		if sites[s.Name] {
			return fmt.Errorf("line %d: site %q is listed twice", s.Line, s.Name)
		}
		sites[s.Name] = true
	}
	spec := n.Spec()
	return spec.Validate(c.Groups)
}

// Spec returns the name as its policy reads it (package policy validates and compiles it).
func (n *Name) Spec() policy.Spec {
	s := policy.Spec{FQDN: n.Name, TTL: n.TTL, Policy: n.Policy, AllDown: n.AllDown, Answers: n.Answers,
		Geo: n.Geo, Latency: n.Latency, Chain: n.Chain}
	for _, site := range n.Sites {
		s.Sites = append(s.Sites, policy.SiteSpec{Name: site.Name, Addresses: site.Addresses, Weight: site.Weight,
			Coordinates: site.Coordinates})
	}
	return s
}

func validateSite(s *Site) error {
	if s.Name == "" {
		return errors.New("field name: missing; name the site, e.g. b34")
	}
	if len(s.Addresses) == 0 {
		return errors.New("field addresses: no address; list the IPv4/IPv6 addresses to answer")
	}
	for _, a := range s.Addresses {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("field addresses: parse %q: not an IP address", a)
		}
	}
	if c := s.Check; c != nil {
		if c.Type != "tcp" && c.Type != "http" {
			return fmt.Errorf("field check.type: %q is unknown; use tcp or http", c.Type)
		}
		if _, err := netip.ParseAddrPort(c.Target); err != nil {
			return fmt.Errorf("field check.target: parse %q: write it as address:port, e.g. 192.0.2.1:80", c.Target)
		}
		if c.Rise < 0 || c.Fall < 0 || c.Interval < 0 || c.Timeout < 0 {
			return errors.New("field check: rise, fall, interval and timeout must be positive")
		}
	}
	return nil
}
