package edge

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/edge/store"
	"github.com/switchyard/switchyard/internal/adminauth"
	"github.com/switchyard/switchyard/internal/compress"
	"github.com/switchyard/switchyard/internal/yamlx"
)

// Config is the edge's configuration, read from YAML (see docs/edge.md for a full example).
type Config struct {
	// Listen is the address clients connect to, e.g. "127.0.0.1:8080" (":0" picks a port).
	Listen string `yaml:"listen"`
	// TLS, when set, serves clients over TLS (and HTTP/3) too, on an address of its own
	// (edge/frontdoor.go).
	TLS *TLSConfig `yaml:"tls"`
	// Origin is the base URL misses are fetched from, e.g. "http://127.0.0.1:8000".
	Origin string `yaml:"origin"`
	// OriginCAFile is a PEM bundle of the authorities an https:// Origin is verified against,
	// instead of the system's roots.
	OriginCAFile string `yaml:"origin_ca_file"`
	// Admin configures the authenticated purge/push/stats API.
	Admin AdminConfig `yaml:"admin"`
	// CacheKey are the rules that tell objects apart by URI (edge/cachekey.go); nil: the URI
	// as sent.
	CacheKey *CacheKey `yaml:"cache_key"`
	// Compress stores and serves compressed codings of what it caches (edge/compress.go).
	Compress *compress.Rule `yaml:"compress"`
	// Memory sizes the memory tier.
	Memory MemoryConfig `yaml:"memory"`
	// Disk configures the optional disk tier.
	Disk DiskConfig `yaml:"disk"`
	// Grace is the operator's default for stale-while-revalidate and stale-if-error, used for
	// responses that carry neither directive (Varnish calls this grace). Zero disables it.
	Grace Duration `yaml:"grace"`
	// PassTTL is how long a URL whose response was found uncacheable goes straight to the origin
	// instead of queueing behind a collapsed fetch (Varnish's hit-for-miss).
	PassTTL Duration `yaml:"pass_ttl"`
	// FetchTimeout bounds one upstream fetch, headers and body.
	FetchTimeout Duration `yaml:"fetch_timeout"`
	// Heuristic tunes freshness of responses with Last-Modified and no explicit expiry.
	Heuristic HeuristicConfig `yaml:"heuristic"`
	// Tiers configures tiered caching for Origin (smart, generic or custom topology).
	Tiers TierConfig `yaml:"tiers"`
	// Slice stores Origin's large objects in fixed slices fetched with Range requests
	// (edge/slice.go); nil: whole objects.
	Slice *SliceConfig `yaml:"slice"`
	// Origins are further origins chosen by the request's Host, each with its own tiers
	// (edge/route.go); requests for other hosts go to Origin.
	Origins []OriginConfig `yaml:"origins"`
	// DisableFastPath serves every request through net/http instead of answering fresh memory
	// hits on the HTTP/1.1 fast path (see edge/fastpath/fast.go); for comparisons and diagnosis.
	DisableFastPath bool `yaml:"disable_fast_path"`
	// RulesConfig (edge/rulesconfig.go): targeted cache control, request headers, client limits.
	RulesConfig `yaml:",inline"`
}

// AdminConfig configures the admin API.
type AdminConfig struct {
	// Listen is the admin API's address; "" disables it.
	Listen string `yaml:"listen"`
	// Token is the bearer token the admin API requires.
	Token string `yaml:"token"`
	// TokenFile names a file holding the token, an alternative to Token.
	TokenFile string `yaml:"token_file"`
	// PushTo are the edges (lower tiers, peers) a pushed object is forwarded to
	// (edge/pushforward.go).
	PushTo []PushPeer `yaml:"push_to"`
	// Fleet are the edges a purge with "fleet": true is sent on to (edge/fleetpurge.go).
	Fleet *FleetConfig `yaml:"fleet"`
}

// MemoryConfig sizes the memory tier.
type MemoryConfig struct {
	// MaxBytes is the memory tier's budget (default 256MiB).
	MaxBytes ByteSize `yaml:"max_bytes"`
	// MaxObjects bounds the memory tier by object count instead of bytes when positive.
	MaxObjects int `yaml:"max_objects"`
	// MaxObjectBytes is the largest body kept in memory (default 8MiB).
	MaxObjectBytes ByteSize `yaml:"max_object_bytes"`
	// Eviction is the memory tier's policy: tinylfu (the default), lru or s3fifo.
	Eviction string `yaml:"eviction"`
}

// DiskConfig configures the disk tier.
type DiskConfig struct {
	// Dir is the cache directory; "" disables the disk tier.
	Dir string `yaml:"dir"`
	// MaxBytes is the disk tier's budget (default 1GiB).
	MaxBytes ByteSize `yaml:"max_bytes"`
}

// HeuristicConfig tunes heuristic freshness (RFC 9111 4.2.2).
type HeuristicConfig struct {
	// Fraction of the time since Last-Modified (default 0.1).
	Fraction float64 `yaml:"fraction"`
	// Max caps the heuristic lifetime (default 24h).
	Max Duration `yaml:"max"`
}

// TierConfig configures tiered caching for one origin.
type TierConfig struct {
	// Topology is smart (the candidate with the lowest measured latency to the origin, the
	// second as fallback), generic (candidates chosen by hashing the URL), custom (Upper, in
	// order) or none. Empty means smart with candidates, custom with upper, else none.
	Topology string `yaml:"topology"`
	// Candidates are base URLs of upper-tier edges (smart and generic topologies).
	Candidates []string `yaml:"candidates"`
	// Upper is the custom topology's explicit upper tier for this origin, then its fallbacks.
	Upper []string `yaml:"upper"`
	// ProbeInterval is how often the candidates are measured again (default 30s).
	ProbeInterval Duration `yaml:"probe_interval"`
	// ProbeSamples is how many requests each measurement takes the minimum of (default 3).
	ProbeSamples int `yaml:"probe_samples"`
	// Token (top-level tiers.token only) is the edge-wide secret shared by every tier: a lower
	// tier sends it in X-Switchyard-Tier, and an upper tier honours the marker only with it.
	// It travels only to https:// tiers unless PlaintextToken is set (edge/origintls.go).
	Token string `yaml:"token"`
	// PlaintextToken (top level only) lets the token travel to http:// tiers: for a network
	// nobody else can read (a lab, a private link); anyone who reads it can pose as a tier.
	PlaintextToken bool `yaml:"plaintext_token"`
	// CAFile is a PEM bundle of the authorities this section's https:// tiers are verified
	// against, instead of the system's roots.
	CAFile string `yaml:"ca_file"`
	// ClientCert and ClientKey (top level only) are the PEM certificate and key this edge
	// presents to its https:// upper tiers (mutual TLS; edge/tiermtls.go).
	ClientCert string `yaml:"client_cert"`
	ClientKey  string `yaml:"client_key"`
	// ClientCAFile (top level only) makes this edge, as an upper tier, honour a lower tier's
	// marker only over TLS with a client certificate that chains to these PEM authorities.
	ClientCAFile string `yaml:"client_ca_file"`
}

// Duration is a time.Duration that reads from YAML as "250ms", "10s", "1h".
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration; write it like 250ms, 10s or 2m", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// ByteSize is a byte count that reads from YAML as 1048576, "512KiB", "64MiB", "2GiB" or "1GB".
type ByteSize int64

// UnmarshalYAML parses a byte count with an optional unit.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = ByteSize(v)
	return nil
}

// ParseByteSize parses "4096", "512KiB", "64MiB", "2GiB", "10MB" (decimal units are powers of 1000).
func ParseByteSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a byte size; write it like 1048576, 512KiB, 64MiB or 2GiB", s)
	}
	return n * mult, nil
}

// LoadConfig reads a YAML config file. Errors name the file, the line and the field.
func LoadConfig(path string) (Config, error) {
	b, err := yamlx.ReadFile(path) // bounded: yamlx.MaxFileBytes
	if err != nil {
		return Config{}, fmt.Errorf("read edge config: %w", err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses YAML, rejects unknown fields, fills defaults (ApplyDefaults) and validates
// (Validate).
func ParseConfig(b []byte) (Config, error) {
	var cfg Config
	// Errors name the line, the field and the fix; io.EOF means an empty document: every
	// field takes its default.
	if err := yamlx.Decode(b, &cfg); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("parse edge config: %w", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return Config{}, fmt.Errorf("parse edge config: %w", err)
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		var fe *fieldError
		if errors.As(err, &fe) {
			if line := lineOf(&root, strings.Split(fe.field, ".")); line > 0 {
				return Config{}, fmt.Errorf("line %d: %w", line, err)
			}
		}
		return Config{}, err
	}
	return cfg, nil
}

// fieldError is a validation error about one YAML field, so the loader can add its line.
type fieldError struct {
	field string
	msg   string
}

// Error names the field and the problem.
func (e *fieldError) Error() string { return "field " + e.field + ": " + e.msg }

// lineOf finds the line of the key at path in a YAML document, or 0.
func lineOf(n *yaml.Node, path []string) int {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	line := 0
	for _, p := range path {
		if i, err := strconv.Atoi(p); err == nil && n.Kind == yaml.SequenceNode {
			if i < 1 || i > len(n.Content) {
				return line
			}
			n = n.Content[i-1] // field paths count list entries from 1
			line = n.Line
			continue
		}
		if n.Kind != yaml.MappingNode {
			return line
		}
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == p {
				line, n, found = n.Content[i].Line, n.Content[i+1], true
				break
			}
		}
		if !found {
			return line
		}
	}
	return line
}

// ApplyDefaults fills every unset option, of the edge, its tiers and its rules. It is
// idempotent and keeps set values; call it before Validate (ParseConfig and New do).
func (c *Config) ApplyDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.Memory.MaxBytes == 0 && c.Memory.MaxObjects == 0 {
		c.Memory.MaxBytes = 256 << 20
	}
	if c.Memory.MaxObjectBytes == 0 {
		c.Memory.MaxObjectBytes = 8 << 20
	}
	if c.Disk.Dir != "" && c.Disk.MaxBytes == 0 {
		c.Disk.MaxBytes = 1 << 30
	}
	if c.PassTTL == 0 {
		c.PassTTL = Duration(2 * time.Minute)
	}
	if c.FetchTimeout == 0 {
		c.FetchTimeout = Duration(60 * time.Second)
	}
	if c.Heuristic.Fraction == 0 {
		c.Heuristic.Fraction = 0.1
	}
	if c.Heuristic.Max == 0 {
		c.Heuristic.Max = Duration(24 * time.Hour)
	}
	c.Tiers.applyDefaults()
	c.Slice.applyDefaults()
	for i := range c.Origins {
		c.Origins[i].Tiers.applyDefaults()
		c.Origins[i].Slice.applyDefaults()
	}
	c.RulesConfig.applyDefaults()
}

// Validate checks every field of a configuration ApplyDefaults has filled, naming the field
// and the fix on error.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return &fieldError{"listen", fmt.Sprintf("%q is not host:port; write it like 127.0.0.1:8080", c.Listen)}
	}
	if c.CacheKey != nil {
		if err := c.CacheKey.validate(); err != nil {
			return err
		}
	}
	if c.Compress != nil {
		if sub, err := c.Compress.Check(); err != nil {
			return &fieldError{strings.TrimSuffix("compress."+sub, "."), err.Error()}
		}
	}
	if c.TLS != nil {
		if err := c.TLS.validate(); err != nil {
			return err
		}
	}
	if c.Origin == "" && len(c.Origins) == 0 {
		return &fieldError{"origin", "missing; set the base URL misses are fetched from, like http://127.0.0.1:8000"}
	}
	if c.Origin != "" {
		if err := checkBaseURL(c.Origin); err != nil {
			return &fieldError{"origin", err.Error()}
		}
	}
	if c.Admin.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Admin.Listen); err != nil {
			return &fieldError{"admin.listen", fmt.Sprintf("%q is not host:port; write it like 127.0.0.1:9091", c.Admin.Listen)}
		}
		c.Admin.Listen = adminauth.Loopback(c.Admin.Listen) // ":9091" binds to loopback
		if c.Admin.Token == "" && c.Admin.TokenFile != "" {
			b, err := os.ReadFile(c.Admin.TokenFile)
			if err != nil {
				return &fieldError{"admin.token_file", fmt.Sprintf("read token: %v", err)}
			}
			c.Admin.Token = strings.TrimSpace(string(b))
		}
		if host, _, _ := net.SplitHostPort(c.Admin.Listen); c.Admin.Token == "" && !loopbackHost(host) {
			return &fieldError{"admin.token", fmt.Sprintf("missing while admin.listen %s is not a loopback address; anyone who reaches it could purge the cache, so set a bearer token (admin.token or admin.token_file) or listen on 127.0.0.1", c.Admin.Listen)}
		}
		if c.Admin.Token == "" {
			return &fieldError{"admin.token", "missing; the admin API purges and pushes, so it needs a bearer token (admin.token or admin.token_file)"}
		}
	}
	if err := c.Admin.validatePushPeers(); err != nil {
		return err
	}
	if err := c.Admin.Fleet.validate(c.Admin.Listen); err != nil {
		return err
	}
	if c.Memory.MaxObjects < 0 {
		return &fieldError{"memory.max_objects", "must not be negative"}
	}
	if err := store.CheckEviction(c.Memory.Eviction); err != nil {
		return &fieldError{"memory.eviction", err.Error()}
	}
	if c.Heuristic.Fraction < 0 || c.Heuristic.Fraction > 1 {
		return &fieldError{"heuristic.fraction", fmt.Sprintf("%v is outside 0..1; RFC 9111 suggests 0.1", c.Heuristic.Fraction)}
	}
	if err := c.checkTierToken(); err != nil {
		return err
	}
	if err := c.checkTierMTLS(); err != nil {
		return err
	}
	if err := c.Tiers.validate("tiers"); err != nil {
		return err
	}
	if err := c.validateOrigins(); err != nil {
		return err
	}
	if err := c.Slice.validate("slice", int64(c.Memory.MaxObjectBytes)); err != nil {
		return err
	}
	return c.RulesConfig.validate()
}

// checkBaseURL accepts http(s)://host[:port] with an optional path prefix.
func checkBaseURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) base URL; write it like http://127.0.0.1:8000", s)
	}
	return nil
}
