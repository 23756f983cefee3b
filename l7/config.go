package l7

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/internal/compress"
	"github.com/switchyard/switchyard/internal/quiclb"
	"github.com/switchyard/switchyard/internal/tlsconf"
	"github.com/switchyard/switchyard/internal/yamlx"

	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
	"github.com/switchyard/switchyard/l7/route"
)

// Config is the L7 configuration file.
type Config struct {
	// Listeners are the addresses the proxy accepts clients on.
	Listeners []Listener `yaml:"listeners"`
	// Admin is the admin/metrics endpoint.
	Admin Admin `yaml:"admin"`
	// Limits bound global resources.
	Limits Limits `yaml:"limits"`
	// Timeouts for client connections and requests.
	Timeouts Timeouts `yaml:"timeouts"`
	// AccessLog is "stdout", "stderr", "syslog", "off" or a file path (reopened on SIGUSR1);
	// "off" by default.
	AccessLog string `yaml:"access_log"`
	// AccessLogFormat is json (the default), text, or a template of $variables
	// (l7/accesslog.go), e.g. `$remote_addr - [$time_local] "$request" $status $body_bytes_sent`.
	AccessLogFormat string `yaml:"access_log_format"`
	// RateLimit applies to every route that sets none of its own.
	RateLimit *RateLimit `yaml:"rate_limit"`
	// Routes are tried in order; the first match wins.
	Routes []Route `yaml:"routes"`
	// Pools are the application pools routes send to.
	Pools []Pool `yaml:"pools"`
	// EventLoops is how many epoll event loops serve plain HTTP/1.1 (like nginx's
	// worker_processes): 0 (the default) for one per CPU the Go runtime uses (GOMAXPROCS), -1
	// for none (a goroutine per connection). Read at start; a reload does not change it.
	EventLoops int `yaml:"event_loops"`

	lines map[string]int // field path -> line, for errors
}

// Listener is one client-facing address.
type Listener struct {
	// Address is host:port, e.g. "127.0.0.1:8080" or a VIP on loopback "10.0.0.100:80".
	Address string `yaml:"address"`
	// H2C accepts HTTP/2 without TLS (prior knowledge) beside HTTP/1.1.
	H2C bool `yaml:"h2c"`
	// TLS terminates TLS with these certificates, chosen by SNI; HTTP/2 is offered by ALPN.
	TLS *tlsconf.Config `yaml:"tls"`
	// HTTP3 (with TLS) serves HTTP/3 on the same port over UDP, advertised with Alt-Svc.
	HTTP3 bool `yaml:"http3"`
	// QUICLB (with http3) issues HTTP/3 connection IDs that name this instance to a balancer
	// routing QUIC by connection ID (internal/quiclb; the VIP's quic block on the balancer, this
	// instance's server_id there): a client that changes its address keeps this instance.
	QUICLB *quiclb.Config `yaml:"quic_lb"`
	// RedirectHTTPS answers every request with 308 to https on this port instead of proxying.
	RedirectHTTPS int `yaml:"redirect_https"`
	// ProxyProtocol takes client addresses from the PROXY protocol header of trusted sources.
	ProxyProtocol *ProxyProtocol `yaml:"proxy_protocol"`
}

// Admin is the admin endpoint (admin_auth.go): address empty disables it, one without a host
// (":9901") binds to loopback. POST /drain and /reload need the bearer token.
type Admin struct {
	Address string `yaml:"address"`
	// Token is the bearer token of the mutating endpoints; without one they answer 403, and an
	// address reachable from other hosts is refused.
	Token string `yaml:"token"`
	// TokenFile names a file holding the token, an alternative to Token.
	TokenFile string `yaml:"token_file"`
}

// Limits bound the proxy's global resources.
type Limits struct {
	// MaxInFlight is the global in-flight request limit; past it requests are shed with 503.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxHeaderBytes bounds a request head; larger ones get 431.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections caps open client connections; past it a new connection gets 503 and is
	// closed. 0 (the default) derives the cap from the descriptor limit (RLIMIT_NOFILE, raised to
	// its hard limit at start) minus a reserve for upstream connections and health checks; a
	// larger value is lowered to that. Read at start; a reload does not change it.
	MaxConnections int `yaml:"max_connections"`
}

// Timeouts for the client side.
type Timeouts struct {
	// ReadHeader bounds the time to receive a request head; it cuts off slowloris clients.
	ReadHeader time.Duration `yaml:"read_header"`
	// Idle closes keep-alive connections without a request for this long.
	Idle time.Duration `yaml:"idle"`
	// Total bounds a whole request, body upload and response included, unless a route overrides.
	Total time.Duration `yaml:"total"`
}

// RateLimit is a token bucket per client.
type RateLimit struct {
	// Key is "client" (address) or "header:NAME".
	Key string `yaml:"key"`
	// Rate is tokens per second; Burst is the bucket size.
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
}

// Route sends matching requests to a pool.
type Route struct {
	Name  string `yaml:"name"`
	Match Match  `yaml:"match"`
	// Pool is where the route sends; Pools instead splits its requests over several pools by
	// weight (a canary, a migration), in the Gateway API's backendRefs sense.
	Pool  string  `yaml:"pool"`
	Pools []Split `yaml:"pools"`
	// SplitKey makes a split sticky: requests with the same key (client, header:NAME or
	// cookie:NAME) always go to the same pool while the weights stay.
	SplitKey  string        `yaml:"split_key"`
	Filters   *Filters      `yaml:"filters"`
	Mirror    *Mirror       `yaml:"mirror"`
	Retry     *Retry        `yaml:"retry"`
	Timeout   time.Duration `yaml:"timeout"`
	RateLimit *RateLimit    `yaml:"rate_limit"`
	// Compress compresses responses as clients ask (compress.go).
	Compress *compress.Rule `yaml:"compress"`
}

// Split is one pool of a route's weighted split: it gets Weight parts of the route's requests
// (0: none, e.g. a canary switched off).
type Split struct {
	Pool   string `yaml:"pool"`
	Weight int    `yaml:"weight"`
}

// Splits are the pools a route sends to with their weights: Pools, or Pool with weight 1.
func (r Route) Splits() []Split {
	if len(r.Pools) > 0 {
		return r.Pools
	}
	return []Split{{Pool: r.Pool, Weight: 1}}
}

// Match holds a route's conditions; all set ones must hold.
type Match struct {
	Host    string       `yaml:"host"`
	Path    PathMatch    `yaml:"path"`
	Methods []string     `yaml:"methods"`
	Headers []route.Cond `yaml:"headers"`
	Query   []route.Cond `yaml:"query"`
}

// PathMatch sets one of exact, prefix or regex.
type PathMatch struct {
	Exact  string `yaml:"exact"`
	Prefix string `yaml:"prefix"`
	Regex  string `yaml:"regex"`
}

// Retry configures retries of a route.
type Retry struct {
	// Attempts is the number of retries after the first try.
	Attempts int `yaml:"attempts"`
	// OnStatus lists upstream statuses that are retried (connect errors always are).
	OnStatus []int `yaml:"on_status"`
	// GRPCStatus lists gRPC statuses (names, e.g. UNAVAILABLE) retried when a backend answers a
	// gRPC call with one in trailers-only form (nothing of the response streamed yet).
	GRPCStatus []string `yaml:"grpc_status"`
	// NonIdempotent opts the route in to retrying POST, PATCH and other non-idempotent methods.
	NonIdempotent bool `yaml:"non_idempotent"`
	// BufferBody buffers request bodies up to this many bytes so they can be replayed; a larger
	// or unbuffered body is never replayed, so the request is not retried.
	BufferBody int64 `yaml:"buffer_body"`
	// FailoverHeader, when set (e.g. X-Edge-Failover), is added with the value 1 to a response
	// that came from a retry on another backend, so clients and tests can see the failover.
	FailoverHeader string `yaml:"failover_header"`
}

// Pool is a set of backends doing the same work.
type Pool struct {
	Name string `yaml:"name"`
	// Balance is round_robin (default), least_request, hash or sticky.
	Balance  string    `yaml:"balance"`
	Hash     *Hash     `yaml:"hash"`
	Sticky   *Sticky   `yaml:"sticky"`
	Backends []Backend `yaml:"backends"`
	// Protocol to the backends: http1 (default), h2c, or h2 (TLS).
	Protocol string `yaml:"protocol"`
	// InsecureSkipVerify skips verification of backend certificates (h2, or http1 with tls).
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// TLS is TLS to the backends: HTTP/1.1 over TLS for protocol http1 (protocol h2 is always
	// TLS); the roots that verify them, the name verified, and a client certificate for mutual
	// TLS.
	TLS *UpstreamTLS `yaml:"tls"`
	// SendProxyProtocol (v1 or v2) starts each connection to a backend with a PROXY header
	// carrying the client's address (HAProxy's send-proxy); such connections serve one client
	// connection each (http1 pools only).
	SendProxyProtocol string `yaml:"send_proxy_protocol"`
	// MaxInFlight bounds requests in flight to the pool; past it requests are shed with 503.
	MaxInFlight int          `yaml:"max_in_flight"`
	Timeouts    PoolTimeouts `yaml:"timeouts"`
	// MaxIdlePerBackend bounds pooled idle upstream connections per backend.
	MaxIdlePerBackend int          `yaml:"max_idle_per_backend"`
	Health            *Health      `yaml:"health"`
	Outlier           *Outlier     `yaml:"outlier"`
	RetryBudget       *RetryBudget `yaml:"retry_budget"`
}

// Hash configures consistent hashing.
type Hash struct {
	// Key is header:NAME, cookie:NAME, path or client.
	Key string `yaml:"key"`
	// LoadFactor bounds a backend's in-flight requests to this multiple of the average (> 1).
	LoadFactor float64 `yaml:"load_factor"`
}

// Sticky configures cookie sessions.
type Sticky struct {
	Cookie string        `yaml:"cookie"`
	TTL    time.Duration `yaml:"ttl"`
}

// Backend is one upstream server.
type Backend struct {
	Address string `yaml:"address"`
	Weight  int    `yaml:"weight"`
}

// PoolTimeouts for the upstream side.
type PoolTimeouts struct {
	Connect time.Duration `yaml:"connect"`
	Header  time.Duration `yaml:"header"`
	Idle    time.Duration `yaml:"idle"`
}

// Health configures active checks.
type Health struct {
	// Type is http (GET Path, Expect status) or grpc (the standard grpc.health.v1.Health/Check
	// of Service: healthy when the backend answers SERVING; h2c and h2 pools only).
	Type     string        `yaml:"type"`
	Service  string        `yaml:"service"`
	Path     string        `yaml:"path"`
	Interval time.Duration `yaml:"interval"`
	Timeout  time.Duration `yaml:"timeout"`
	Rise     int           `yaml:"rise"`
	Fall     int           `yaml:"fall"`
	Expect   int           `yaml:"expect_status"`
}

// Outlier configures passive ejection.
type Outlier struct {
	ConsecutiveErrors int           `yaml:"consecutive_errors"`
	EjectionTime      time.Duration `yaml:"ejection_time"`
	MaxEjectedPercent int           `yaml:"max_ejected_percent"`
}

// RetryBudget bounds retries to a share of requests.
type RetryBudget struct {
	Percent      float64 `yaml:"percent"`
	MinPerSecond int     `yaml:"min_per_second"`
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (*Config, error) {
	data, err := yamlx.ReadFile(path) // bounded: yamlx.MaxFileBytes
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// ParseConfig parses YAML, rejects unknown fields, applies defaults (ApplyDefaults) and validates
// (Validate). Errors name
// the line and the field.
func ParseConfig(data []byte) (*Config, error) {
	cfg := &Config{}
	if err := yamlx.Decode(data, cfg); err != nil { // errors name the line, the field and the fix
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("parse config: the file is empty; start from the example in docs/l7.md")
		}
		return nil, fmt.Errorf("parse config: %w", err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	cfg.lines = map[string]int{}
	indexLines(&root, "", cfg.lines)
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// indexLines records the line of every mapping key and sequence item by its field path, such as
// "pools[0].health.interval".
func indexLines(n *yaml.Node, path string, out map[string]int) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			indexLines(c, path, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			out[p] = n.Content[i].Line
			indexLines(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			out[p] = c.Line
			indexLines(c, p, out)
		}
	}
}

// fieldError names the line and field of a validation error.
func (c *Config) fieldError(field, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	// Fall back to the nearest enclosing field that has a line (a defaulted field has none).
	for p := field; p != ""; {
		if line, ok := c.lines[p]; ok {
			return fmt.Errorf("config line %d: %s: %s", line, field, msg)
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return fmt.Errorf("config: %s: %s", field, msg)
}

// ApplyDefaults fills the unset fields of the configuration and of each pool. It is idempotent
// and keeps set values; call it before Validate (ParseConfig does).
func (c *Config) ApplyDefaults() {
	if c.Limits.MaxInFlight == 0 {
		c.Limits.MaxInFlight = 10000
	}
	if c.Limits.MaxHeaderBytes == 0 {
		c.Limits.MaxHeaderBytes = 64 << 10
	}
	if c.Timeouts.ReadHeader == 0 {
		c.Timeouts.ReadHeader = 10 * time.Second
	}
	if c.Timeouts.Idle == 0 {
		c.Timeouts.Idle = 60 * time.Second
	}
	if c.Timeouts.Total == 0 {
		c.Timeouts.Total = 60 * time.Second
	}
	if c.AccessLog == "" {
		c.AccessLog = "off"
	}
	for i := range c.Pools {
		c.Pools[i].applyDefaults()
	}
}

// applyDefaults fills a pool's unset fields: balance, protocol, timeouts, weights, and the health,
// outlier, retry and sticky settings it has.
func (p *Pool) applyDefaults() {
	if p.Balance == "" {
		p.Balance = "round_robin"
	}
	if p.Protocol == "" {
		p.Protocol = "http1"
	}
	if p.Timeouts.Connect == 0 {
		p.Timeouts.Connect = 2 * time.Second
	}
	if p.Timeouts.Header == 0 {
		p.Timeouts.Header = 30 * time.Second
	}
	if p.Timeouts.Idle == 0 {
		p.Timeouts.Idle = 90 * time.Second
	}
	if p.MaxIdlePerBackend == 0 {
		p.MaxIdlePerBackend = 256
	}
	for j := range p.Backends {
		if p.Backends[j].Weight == 0 {
			p.Backends[j].Weight = 1
		}
	}
	if h := p.Health; h != nil {
		if h.Type == "" {
			h.Type = "http"
		}
		if h.Path == "" && h.Type == "http" {
			h.Path = "/health"
		}
		if h.Interval == 0 {
			h.Interval = 2 * time.Second
		}
		if h.Timeout == 0 {
			h.Timeout = time.Second
		}
		if h.Rise == 0 {
			h.Rise = 2
		}
		if h.Fall == 0 {
			h.Fall = 2
		}
		if h.Expect == 0 {
			h.Expect = 200
		}
	}
	if o := p.Outlier; o != nil {
		if o.EjectionTime == 0 {
			o.EjectionTime = 10 * time.Second
		}
		if o.MaxEjectedPercent == 0 {
			o.MaxEjectedPercent = 50
		}
	}
	if p.RetryBudget == nil {
		p.RetryBudget = &RetryBudget{Percent: 20, MinPerSecond: 3}
	}
	if p.Balance == "sticky" && p.Sticky == nil {
		p.Sticky = &Sticky{}
	}
	if p.Sticky != nil && p.Sticky.Cookie == "" {
		p.Sticky.Cookie = "switchyard_session"
	}
	if p.Hash != nil && p.Hash.LoadFactor == 0 {
		p.Hash.LoadFactor = 1.25
	}
}

var errNoListener = errors.New("no listeners; add listeners: [{address: 127.0.0.1:8080}]")

// Validate checks a configuration ApplyDefaults has filled; errors name the line and the field
// when the configuration came from ParseConfig.
func (c *Config) Validate() error {
	if len(c.Listeners) == 0 {
		return fmt.Errorf("config: %w", errNoListener)
	}
	if err := c.validateAdmin(); err != nil {
		return err
	}
	if f := c.AccessLogFormat; f != "" && f != "json" && f != "text" {
		if _, err := parseAccessFormat(f); err != nil {
			return c.fieldError("access_log_format", "%v", err)
		}
	}
	for i, l := range c.Listeners {
		f := fmt.Sprintf("listeners[%d]", i)
		if !strings.Contains(l.Address, ":") {
			return c.fieldError(f+".address", "%q is not host:port; write e.g. 127.0.0.1:8080", l.Address)
		}
		if pp := l.ProxyProtocol; pp != nil {
			if _, err := pp.prefixes(); err != nil {
				return c.fieldError(f+".proxy_protocol", "%v", err)
			}
			if l.RedirectHTTPS > 0 {
				return c.fieldError(f+".proxy_protocol", "not on a redirect_https listener; put it on the listeners that proxy")
			}
		}
		if l.TLS != nil {
			if path, problem, ok := l.TLS.Validate(f + ".tls"); !ok {
				return c.fieldError(path, "%s", problem)
			}
		}
		if l.HTTP3 && l.TLS == nil {
			return c.fieldError(f+".http3", "HTTP/3 is TLS only: add tls: {certificates: [...]} to this listener, or remove http3")
		}
		if l.QUICLB != nil && !l.HTTP3 {
			return c.fieldError(f+".quic_lb", "names HTTP/3 connections: add http3: true to this listener, or remove quic_lb")
		}
		if l.QUICLB != nil {
			if err := l.QUICLB.Validate(); err != nil {
				return c.fieldError(f+".quic_lb", "%v", err)
			}
		}
		if l.RedirectHTTPS < 0 || l.RedirectHTTPS > 65535 {
			return c.fieldError(f+".redirect_https", "port %d out of range 1-65535", l.RedirectHTTPS)
		}
	}
	if err := c.validateACME(); err != nil {
		return err
	}
	if err := c.validateRateLimit("rate_limit", c.RateLimit); err != nil {
		return err
	}
	switch {
	case c.Limits.MaxInFlight < 0:
		return c.fieldError("limits.max_in_flight", "negative; use a positive limit")
	case c.Limits.MaxConnections < 0:
		return c.fieldError("limits.max_connections", "negative; use 0 for the automatic cap or a positive limit")
	case c.Limits.MaxHeaderBytes < 1024:
		return c.fieldError("limits.max_header_bytes", "%d is below 1024 bytes", c.Limits.MaxHeaderBytes)
	case c.EventLoops < -1 || c.EventLoops > 256:
		return c.fieldError("event_loops", "%d is out of range; use 0 for one per CPU, -1 for none, or 1-256", c.EventLoops)
	}
	pools := map[string]bool{}
	for i, p := range c.Pools {
		f := fmt.Sprintf("pools[%d]", i)
		if err := c.validatePool(f, p); err != nil {
			return err
		}
		if pools[p.Name] {
			return c.fieldError(f+".name", "duplicate pool %q; pool names must be unique", p.Name)
		}
		pools[p.Name] = true
	}
	for i, r := range c.Routes {
		f := fmt.Sprintf("routes[%d]", i)
		if err := c.validateSplits(f, r, pools); err != nil {
			return err
		}
		if err := c.validateFilters(f+".filters", r.Filters, r.Match.Path.Prefix); err != nil {
			return err
		}
		if err := c.validateMirror(f+".mirror", r); err != nil {
			return err
		}
		if cp := r.Compress; cp != nil {
			if err := c.validateCompress(f+".compress", cp); err != nil {
				return err
			}
		}
		if rt := r.Retry; rt != nil {
			if rt.Attempts < 0 || rt.Attempts > 10 {
				return c.fieldError(f+".retry.attempts", "%d outside 0-10", rt.Attempts)
			}
			for _, s := range rt.OnStatus {
				if s < 100 || s > 599 {
					return c.fieldError(f+".retry.on_status", "%d is not an HTTP status", s)
				}
			}
			for _, s := range rt.GRPCStatus {
				if code, ok := core.GRPCCodes[s]; !ok || code == 0 {
					return c.fieldError(f+".retry.grpc_status", "%q is not a gRPC error status; use a name such as UNAVAILABLE or RESOURCE_EXHAUSTED", s)
				}
			}
			if err := checkFailoverHeader(rt.FailoverHeader); err != nil {
				return c.fieldError(f+".retry.failover_header", "%v", err)
			}
		}
		if err := c.validateRateLimit(f+".rate_limit", r.RateLimit); err != nil {
			return err
		}
	}
	if _, err := route.Compile(c.routeSpecs()); err != nil {
		return c.fieldError("routes", "%v", err)
	}
	return nil
}

func (c *Config) validatePool(f string, p Pool) error {
	if p.Name == "" {
		return c.fieldError(f+".name", "empty; name the pool")
	}
	if len(p.Backends) == 0 {
		return c.fieldError(f+".backends", "pool %q has no backends; list at least one address", p.Name)
	}
	for j, b := range p.Backends {
		if !strings.Contains(b.Address, ":") {
			return c.fieldError(fmt.Sprintf("%s.backends[%d].address", f, j), "%q is not host:port", b.Address)
		}
		if b.Weight < 0 {
			return c.fieldError(fmt.Sprintf("%s.backends[%d].weight", f, j), "negative weight")
		}
	}
	switch p.Balance {
	case "round_robin", "least_request":
	case "hash":
		if p.Hash == nil {
			return c.fieldError(f+".hash", "balance hash needs hash: {key: header:NAME|cookie:NAME|path|client}")
		}
		if _, err := balance.ParseKey(p.Hash.Key); err != nil {
			return c.fieldError(f+".hash.key", "%v", err)
		}
	case "sticky":
	default:
		return c.fieldError(f+".balance", "unknown %q; use round_robin, least_request, hash or sticky", p.Balance)
	}
	switch p.Protocol {
	case "http1", "h2c", "h2":
	default:
		return c.fieldError(f+".protocol", "unknown %q; use http1, h2c or h2", p.Protocol)
	}
	switch {
	case p.SendProxyProtocol != "" && p.SendProxyProtocol != "v1" && p.SendProxyProtocol != "v2":
		return c.fieldError(f+".send_proxy_protocol", "unknown %q; use v1 or v2", p.SendProxyProtocol)
	case p.SendProxyProtocol != "" && p.Protocol != "http1":
		return c.fieldError(f+".send_proxy_protocol", "a PROXY header describes one client connection and an %s connection carries many clients' streams; use protocol: http1 for this pool", p.Protocol)
	}
	if p.TLS != nil {
		if p.Protocol == "h2c" {
			return c.fieldError(f+".tls", "h2c is HTTP/2 in cleartext; use protocol: h2 for HTTP/2 over TLS, or http1 with tls for HTTP/1.1 over TLS")
		}
		if _, err := p.TLS.config(false); err != nil {
			return c.fieldError(f+".tls", "%v", err)
		}
	}
	if h := p.Health; h != nil {
		switch {
		case h.Type != "http" && h.Type != "grpc":
			return c.fieldError(f+".health.type", "unknown %q; use http or grpc", h.Type)
		case h.Type == "grpc" && p.Protocol == "http1":
			return c.fieldError(f+".health.type", "grpc checks need an HTTP/2 pool: set the pool's protocol to h2c or h2")
		case h.Type == "grpc" && h.Path != "":
			return c.fieldError(f+".health.path", "a grpc check calls grpc.health.v1.Health/Check: remove path (name the service with service:)")
		case h.Type == "http" && h.Service != "":
			return c.fieldError(f+".health.service", "service names a gRPC service: set type: grpc, or remove it")
		}
		if h.Type == "http" && !strings.HasPrefix(h.Path, "/") {
			return c.fieldError(f+".health.path", "%q does not start with /", h.Path)
		}
		if h.Timeout > h.Interval {
			return c.fieldError(f+".health.timeout", "%v is longer than the interval %v", h.Timeout, h.Interval)
		}
	}
	if o := p.Outlier; o != nil && (o.MaxEjectedPercent < 0 || o.MaxEjectedPercent > 100) {
		return c.fieldError(f+".outlier.max_ejected_percent", "%d outside 0-100", o.MaxEjectedPercent)
	}
	if b := p.RetryBudget; b.Percent < 0 || b.Percent > 100 {
		return c.fieldError(f+".retry_budget.percent", "%v outside 0-100", b.Percent)
	}
	return nil
}

func (c *Config) validateRateLimit(f string, r *RateLimit) error {
	if r == nil {
		return nil
	}
	if r.Rate <= 0 {
		return c.fieldError(f+".rate", "must be > 0 requests per second")
	}
	if r.Key != "client" && !strings.HasPrefix(r.Key, "header:") {
		return c.fieldError(f+".key", "%q: use client or header:NAME", r.Key)
	}
	return nil
}

// routeSpecs converts the routes to the matcher's form.
func (c *Config) routeSpecs() []route.Spec {
	specs := make([]route.Spec, len(c.Routes))
	for i, r := range c.Routes {
		specs[i] = route.Spec{Name: r.Name, Host: r.Match.Host, PathExact: r.Match.Path.Exact,
			PathPrefix: r.Match.Path.Prefix, PathRegex: r.Match.Path.Regex, Methods: r.Match.Methods,
			Headers: r.Match.Headers, Query: r.Match.Query}
	}
	return specs
}

// validateFilters checks a route's filters at field f (the route matching path prefix, or "").
func (c *Config) validateFilters(f string, fl *Filters, prefix string) error {
	if fl == nil {
		return nil
	}
	if m := fl.RequestHeaders; m != nil {
		if err := m.validate(c, f+".request_headers"); err != nil {
			return err
		}
	}
	if m := fl.ResponseHeaders; m != nil {
		if err := m.validate(c, f+".response_headers"); err != nil {
			return err
		}
	}
	if rw := fl.URLRewrite; rw != nil {
		if err := rw.validate(c, f+".url_rewrite", prefix); err != nil {
			return err
		}
	}
	if rd := fl.Redirect; rd != nil {
		return rd.validate(c, f+".redirect")
	}
	return nil
}

// validateMirror checks route r's mirror at field f: a known HTTP/1.1 shadow pool, a share of
// 1-100 percent, and a route whose own pools are HTTP/1.1 (the copy is the HTTP/1.1 request the
// core builds for them).
func (c *Config) validateMirror(f string, r Route) error {
	m := r.Mirror
	if m == nil {
		return nil
	}
	protocol := map[string]string{}
	for _, p := range c.Pools {
		protocol[p.Name] = p.Protocol
	}
	switch pr, ok := protocol[m.Pool]; {
	case !ok:
		return c.fieldError(f+".pool", "route %q mirrors to unknown pool %q; define it under pools", r.Name, m.Pool)
	case pr != "http1":
		return c.fieldError(f+".pool", "pool %q speaks %s; a shadow pool must be http1", m.Pool, pr)
	case m.Percent < 0 || m.Percent > 100:
		return c.fieldError(f+".percent", "%d outside 1-100 (leave it out for every request)", m.Percent)
	case m.MaxBody < 0:
		return c.fieldError(f+".max_body", "%d is negative", m.MaxBody)
	}
	for _, sp := range r.Splits() {
		if pr := protocol[sp.Pool]; sp.Pool != "" && pr != "http1" {
			return c.fieldError(f, "route %q sends to %s pool %q; mirroring copies HTTP/1.1 requests, so the route's pools must be http1", r.Name, pr, sp.Pool)
		}
	}
	return nil
}

// validateSplits checks where route r (at field f) sends: one pool, or weighted pools that all
// exist, with weights of at least 0 and a total above 0.
func (c *Config) validateSplits(f string, r Route, pools map[string]bool) error {
	switch {
	case r.Pool != "" && len(r.Pools) > 0:
		return c.fieldError(f+".pools", "route %q sets both pool and pools; keep pool for one pool, pools for a weighted split", r.Name)
	case r.Pool == "" && len(r.Pools) == 0 && r.Filters != nil && r.Filters.Redirect != nil:
		return nil // the proxy answers a redirect route itself
	case len(r.Pools) == 0 && !pools[r.Pool]:
		return c.fieldError(f+".pool", "route %q sends to unknown pool %q; define it under pools", r.Name, r.Pool)
	}
	total := 0
	for i, sp := range r.Pools {
		switch {
		case !pools[sp.Pool]:
			return c.fieldError(fmt.Sprintf("%s.pools[%d].pool", f, i), "route %q splits to unknown pool %q; define it under pools", r.Name, sp.Pool)
		case sp.Weight < 0:
			return c.fieldError(fmt.Sprintf("%s.pools[%d].weight", f, i), "%d is negative; give 0 (no requests) or more", sp.Weight)
		}
		total += sp.Weight
	}
	if len(r.Pools) > 0 && total == 0 {
		return c.fieldError(f+".pools", "route %q: the weights add up to 0, so it could send nowhere; give at least one pool a weight above 0", r.Name)
	}
	if r.SplitKey != "" {
		if len(r.Pools) == 0 {
			return c.fieldError(f+".split_key", "route %q has no split to make sticky; use it with pools", r.Name)
		}
		if _, err := balance.ParseKey(r.SplitKey); err != nil || r.SplitKey == "path" {
			return c.fieldError(f+".split_key", "unknown %q; use client, header:NAME or cookie:NAME", r.SplitKey)
		}
	}
	return nil
}

// validateACME checks that a listener answering HTTP-01 has a plain listener beside it: the CA
// fetches the challenge over plain HTTP.
func (c *Config) validateACME() error {
	plain := false
	for _, l := range c.Listeners {
		plain = plain || l.TLS == nil
	}
	for i, l := range c.Listeners {
		if l.TLS != nil && l.TLS.ACME != nil && l.TLS.ACME.Uses(tlsconf.HTTP01) && !plain {
			return c.fieldError(fmt.Sprintf("listeners[%d].tls.acme.challenges", i),
				"http-01 is answered on a plain listener and there is none; add one (address: 0.0.0.0:80, redirect_https: 443 will do) or use challenges: [tls-alpn-01]")
		}
	}
	return nil
}

// UpstreamTLS is a pool's TLS to its backends (protocol h2).
type UpstreamTLS struct {
	// CAFile holds the PEM roots that verify the backends (default: the system's).
	CAFile string `yaml:"ca_file"`
	// ServerName is the name verified (default: the backend address's host).
	ServerName string `yaml:"server_name"`
	// Cert and Key are a client certificate the proxy presents (mutual TLS).
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

// config builds the client TLS configuration (insecure: skip verification, the pool's
// insecure_skip_verify).
func (u *UpstreamTLS) config(insecure bool) (*tls.Config, error) {
	tc := &tls.Config{InsecureSkipVerify: insecure} //nolint:gosec // opt-in per pool
	if u == nil {
		return tc, nil
	}
	tc.ServerName = u.ServerName
	if u.CAFile != "" {
		pem, err := os.ReadFile(u.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read ca_file: %w (give the PEM roots of the backends' certificates)", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read ca_file %s: no PEM certificate in it", u.CAFile)
		}
	}
	switch {
	case (u.Cert == "") != (u.Key == ""):
		return nil, errors.New("cert and key go together: set both for a client certificate, or neither")
	case u.Cert != "":
		pair, err := tls.LoadX509KeyPair(u.Cert, u.Key)
		if err != nil {
			return nil, fmt.Errorf("load client certificate %s: %w (check the cert and key paths and that the key matches)", u.Cert, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}
