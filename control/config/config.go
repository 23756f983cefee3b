// Package config reads, validates and writes the L4 balancer's YAML configuration: the interface
// and its options, the VIPs, their backends and health checks. Every error names the line and the
// field at fault and says how to fix it, so that a bad reload can be corrected from the log alone.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/internal/atomicfile"
	"github.com/switchyard/switchyard/internal/maglev"

	"github.com/switchyard/switchyard/internal/yamlx"
)

// Policies for a VIP whose every backend fails its health checks.
const (
	// AllDownKeep keeps every (non-drained) backend in the ring as if healthy: a check that
	// fails everywhere at once is more often the checker's fault than every backend's.
	AllDownKeep = "keep"
	// AllDownDrop empties the ring: new flows are dropped (counted as drop_no_backend).
	AllDownDrop = "drop"
)

// Hash options of a VIP (control/reconcile turns them into the forwarder's VIP flags).
const (
	HashFiveTuple    = "five-tuple"
	HashSourceOnly   = "source-only"
	HashNoSourcePort = "no-source-port"
)

// Config is the whole balancer configuration.
type Config struct {
	// Interface is the network interface the forwarder is attached to.
	Interface string `yaml:"interface"`
	// XDPMode is native (default) or generic.
	XDPMode string `yaml:"xdp_mode,omitempty"`
	// PinDir is where maps and link are pinned; default /sys/fs/bpf/switchyard/<interface>.
	PinDir string `yaml:"pin_dir,omitempty"`
	// Socket is the unix socket of the control API; default /run/switchyard/<interface>.sock.
	Socket string `yaml:"socket,omitempty"`
	// Metrics is the address of the Prometheus endpoint; empty serves none.
	Metrics string `yaml:"metrics,omitempty"`
	// NextHop is the router toward the backends; empty means the default route's gateway.
	NextHop string `yaml:"next_hop,omitempty"`
	// MTU is the egress MTU; 0 means the interface's.
	MTU int `yaml:"mtu,omitempty"`
	// ICMPTooBig answers packets too big after encapsulation with ICMP (default true).
	ICMPTooBig *bool `yaml:"icmp_too_big,omitempty"`
	// SecondChance makes a mid-stream TCP packet without a connection-table entry carry the
	// previous Maglev table's pick to its backend, which sends it on there when it does not hold
	// the flow (default true; docs/xdp.md, "Second chance").
	SecondChance *bool `yaml:"second_chance,omitempty"`
	// SecondChanceRetire empties a VIP's previous table this long after the change that made it
	// (default 0: kept until the next change).
	SecondChanceRetire Duration `yaml:"second_chance_retire,omitempty"`
	// SYNInsertLimit, when set, is how many new connection-table entries a second each CPU
	// makes for SYNs; past it a SYN is forwarded by the ring without one (default 0: no limit;
	// docs/xdp.md, "The SYN guard").
	SYNInsertLimit uint32 `yaml:"syn_insert_limit,omitempty"`
	// EncapSource4 is the outer IPv4 source base; its low 8 bits come from the flow hash.
	EncapSource4 string `yaml:"encap_source4,omitempty"`
	// EncapSource6 is the outer IPv6 source base; its last 32 bits come from the flow hash.
	EncapSource6 string `yaml:"encap_source6,omitempty"`
	// UDPTimeout is how long an idle UDP flow keeps its backend (default 30s).
	UDPTimeout Duration `yaml:"udp_timeout,omitempty"`
	// DrainTimeout ends the established flows of a drained backend (default 5m; 0 after
	// defaults is impossible, use a very long value to wait for ever).
	DrainTimeout Duration `yaml:"drain_timeout,omitempty"`
	// FlowIdle is how long a TCP flow may be silent and still count as active (default 5m).
	FlowIdle Duration `yaml:"flow_idle,omitempty"`
	// RingSize caps the ring size a VIP gets from its backend count, and is every VIP's size
	// with ring_sizing: fixed; a prime (default 65537). See rings.go.
	RingSize uint32 `yaml:"ring_size,omitempty"`
	// RingSizing is auto (default: each VIP's ring sized from its backends, at most ring_size)
	// or fixed (every VIP's ring is ring_size unless it names its own).
	RingSizing string `yaml:"ring_sizing,omitempty"`
	// RingSlots is how many ring slots the ring maps hold, the space every VIP's ring is placed
	// in (default: twice what the VIPs need, at least max_vips x 3203; pins keep theirs).
	RingSlots uint32 `yaml:"ring_slots,omitempty"`
	// MaxVIPs is how many VIPs the maps hold (default 64).
	MaxVIPs uint32 `yaml:"max_vips,omitempty"`
	// MaxBackends is how many distinct backend addresses the maps hold, plus one (default 4096).
	MaxBackends uint32 `yaml:"max_backends,omitempty"`
	// ConnTableSize is the size of the LRU connection table (default 262144).
	ConnTableSize uint32 `yaml:"conn_table_size,omitempty"`
	// AllBackendsDown is the policy when every backend of a VIP is unhealthy: keep or drop.
	AllBackendsDown string `yaml:"all_backends_down,omitempty"`
	// HealthMode is how health checks reach the backends unless a VIP's health.mode says
	// otherwise: tunnel (the default: the VIP, encapsulated toward the backend as real traffic)
	// or direct (the backend's own address). docs/xdp.md, "Health checks through the tunnel".
	HealthMode string `yaml:"health_mode,omitempty"`
	// VIPs are the balanced services.
	VIPs []VIP `yaml:"vips"`
	// BGP announces the VIPs to routers; nil announces nothing (bgp.go).
	BGP *BGP `yaml:"bgp,omitempty"`
	// Guard is the DDoS guard of every VIP (guard.go); nil guards nothing.
	Guard *Guard `yaml:"guard,omitempty"`
	// addrs bounds from above the distinct backend addresses, once validated (0: unknown), so
	// that ValidateChange counts only what a change added (validate.go).
	addrs int
	// nextHop, encap4 and encap6 are NextHop, EncapSource4 and EncapSource6 parsed (addr.go).
	nextHop, encap4, encap6 parsedAddr
}

// VIP is one balanced service: an address, a port (0 = all), a protocol and its backends.
type VIP struct {
	// Name identifies the VIP in the CLI and metrics; default "<address>:<port>/<protocol>".
	Name string `yaml:"name,omitempty"`
	// Address is the VIP address (IPv4 or IPv6).
	Address string `yaml:"address"`
	// Port is the service port; 0 balances every port of the address.
	Port uint16 `yaml:"port"`
	// Protocol is tcp (default) or udp.
	Protocol string `yaml:"protocol,omitempty"`
	// Hash is five-tuple (default), source-only or no-source-port.
	Hash string `yaml:"hash,omitempty"`
	// Health is the backend health check; nil means backends are always healthy.
	Health *HealthCheck `yaml:"health,omitempty"`
	// QUIC routes QUIC packets by the server ID in their connection IDs (quic.go).
	QUIC QUIC `yaml:"quic,omitempty"`
	// RingSize fixes the VIP's Maglev ring size, a prime; 0 (left out) sizes it from the
	// backends (rings.go).
	RingSize uint32 `yaml:"ring_size,omitempty"`
	// Guard is the VIP's own DDoS guard, beside the global one (guard.go).
	Guard *Guard `yaml:"guard,omitempty"`
	// BGP is the VIP's route policy and the nodes that announce it (routepolicy.go); VIPs on
	// one address share a prefix, so they must have the same.
	BGP *VIPBGP `yaml:"bgp,omitempty"`
	// Backends serve the VIP.
	Backends []Backend `yaml:"backends"`
	// addr is Address parsed, filled by validation (addr.go; Equal compares Address).
	addr parsedAddr
}

// Backend is one real server of a VIP.
type Backend struct {
	// Address is the backend's tunnel address (where its decap program listens).
	Address string `yaml:"address"`
	// Weight is its relative share of new flows (default 1).
	Weight uint32 `yaml:"weight,omitempty"`
	// Drained takes it out of the ring; its established flows continue until drain_timeout.
	Drained bool `yaml:"drained,omitempty"`
	// ServerID is its QUIC server ID when the VIP routes QUIC by connection ID; 0 (left out)
	// uses its backend id.
	ServerID uint32 `yaml:"server_id,omitempty"`
	// addr is Address parsed, filled by validation (addr.go; Equal compares Address).
	addr parsedAddr
}

// HealthCheck describes how a VIP's backends are probed.
type HealthCheck struct {
	// Type is tcp (connect) or http (GET).
	Type string `yaml:"type"`
	// Mode is tunnel or direct; empty takes the file's health_mode (default tunnel).
	Mode string `yaml:"mode,omitempty"`
	// Port is the port probed on the backend address; default the VIP port.
	Port uint16 `yaml:"port,omitempty"`
	// Path is the HTTP path (default /).
	Path string `yaml:"path,omitempty"`
	// ExpectStatus is the HTTP status that means healthy (default 200).
	ExpectStatus int `yaml:"expect_status,omitempty"`
	// Interval between probes (default 2s).
	Interval Duration `yaml:"interval,omitempty"`
	// Timeout of one probe (default 1s, at most the interval).
	Timeout Duration `yaml:"timeout,omitempty"`
	// Rise is how many successes in a row make an unhealthy backend healthy (default 2).
	Rise int `yaml:"rise,omitempty"`
	// Fall is how many failures in a row make a healthy backend unhealthy (default 3).
	Fall int `yaml:"fall,omitempty"`
}

// Duration is a time.Duration written as "500ms", "30s" or "5m" in YAML (shared by every stop).
type Duration = yamlx.Duration

// FieldError is a validation error located in the file.
type FieldError struct {
	// Line is the 1-based line of the field (0 when unknown, e.g. a field left out).
	Line int
	// Field is the path of the field, such as vips[0].backends[1].address.
	Field string
	// Msg says what is wrong and how to fix it.
	Msg string
}

// Error renders "line N: field: message".
func (e *FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Msg)
}

// Load reads and validates a configuration file.
func Load(path string) (*Config, error) {
	b, err := yamlx.ReadFile(path) // bounded: yamlx.MaxFileBytes
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes and validates a configuration; unknown fields are errors.
func Parse(b []byte) (*Config, error) {
	var c Config
	if err := yamlx.Decode(b, &c); err != nil { // errors name the line, the field and the fix
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty: give at least `interface:`")
		}
		return nil, err
	}
	// The node tree only locates errors (their lines): it is parsed when there is one, not for
	// every good file (at 4,096 VIPs a second parse is a good part of a start).
	// Validating again finds the same first error (the defaults it applied on the way are valid).
	// An explicit `weight: 0` is told from a left-out weight only by the node tree, so a file
	// that may hold one is validated with the tree from the start.
	if mayHaveZeroWeight(b) {
		var root yaml.Node
		_ = yaml.Unmarshal(b, &root)
		if err := c.validate(&root); err != nil {
			return nil, err
		}
		return &c, nil
	}
	if err := c.validate(nil); err != nil {
		var root yaml.Node
		_ = yaml.Unmarshal(b, &root)
		if lerr := c.validate(&root); lerr != nil {
			return nil, lerr
		}
		return nil, err
	}
	return &c, nil
}

// Marshal writes the configuration as YAML (comments of the original file are not kept).
func (c *Config) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return buf.Bytes(), nil
}

// Save writes the configuration to path atomically (temporary file then rename), readable by
// root only as it names the control socket.
func (c *Config) Save(path string) error {
	b, err := c.Marshal()
	if err != nil {
		return err
	}
	return writeFile(path, b)
}

// writeFile writes b to path atomically, readable by root only.
func writeFile(path string, b []byte) error {
	if err := atomicfile.WriteBytes(path, 0o600, b); err != nil {
		return fmt.Errorf("save config: %w", err)
	}
	return nil
}

// Clone is a deep copy, so that a change can be validated before it replaces the running one:
// CloneForChange with every VIP given its own backends and health check.
func (c *Config) Clone() *Config {
	n := c.CloneForChange()
	for i := range n.VIPs {
		n.MutableVIP(i)
	}
	return n
}

func (v VIP) clone() VIP {
	v.Health = clonePtr(v.Health)
	v.Backends = append([]Backend(nil), v.Backends...)
	v.Guard = v.Guard.Clone()
	v.BGP = v.BGP.Clone()
	return v
}

// Defaults applied by ApplyDefaults.
const (
	DefaultRingSize      = maglev.DefaultSize
	DefaultMaxVIPs       = 64
	DefaultMaxBackends   = 4096
	DefaultConnTableSize = 262144
	DefaultUDPTimeout    = 30 * time.Second
	DefaultDrainTimeout  = 5 * time.Minute
	DefaultFlowIdle      = 5 * time.Minute
)

// ApplyDefaults fills every unset option. It is idempotent and keeps set values; it is called
// after flags override the file, so the interface-dependent defaults see the final interface.
func (c *Config) ApplyDefaults() {
	if c.XDPMode == "" {
		c.XDPMode = "native"
	}
	if c.PinDir == "" && c.Interface != "" {
		c.PinDir = DefaultPinDir(c.Interface)
	}
	if c.Socket == "" && c.Interface != "" {
		c.Socket = DefaultSocket(c.Interface)
	}
	if c.ICMPTooBig == nil {
		t := true
		c.ICMPTooBig = &t
	}
	if c.SecondChance == nil {
		t := true
		c.SecondChance = &t
	}
	if c.UDPTimeout == 0 {
		c.UDPTimeout = Duration(DefaultUDPTimeout)
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = Duration(DefaultDrainTimeout)
	}
	if c.FlowIdle == 0 {
		c.FlowIdle = Duration(DefaultFlowIdle)
	}
	if c.RingSize == 0 {
		c.RingSize = DefaultRingSize
	}
	if c.MaxVIPs == 0 {
		c.MaxVIPs = DefaultMaxVIPs
	}
	if c.MaxBackends == 0 {
		c.MaxBackends = DefaultMaxBackends
	}
	if c.ConnTableSize == 0 {
		c.ConnTableSize = DefaultConnTableSize
	}
	if c.AllBackendsDown == "" {
		c.AllBackendsDown = AllDownKeep
	}
	if c.BGP != nil {
		c.BGP.applyDefaults()
	}
}

// DefaultPinDir is the pin directory of an interface.
func DefaultPinDir(iface string) string { return "/sys/fs/bpf/switchyard/" + iface }

// DefaultSocket is the control socket of an interface.
func DefaultSocket(iface string) string { return "/run/switchyard/" + iface + ".sock" }

// ApplyDefaults fills a VIP's unset fields (name, protocol, hash, weights, health defaults).
func (v *VIP) ApplyDefaults() {
	if v.Protocol == "" {
		v.Protocol = "tcp"
	}
	if v.Hash == "" {
		v.Hash = HashFiveTuple
	}
	if v.Name == "" {
		if a, err := netip.ParseAddr(v.Address); err == nil {
			v.Name = fmt.Sprintf("%s/%s", netip.AddrPortFrom(a, v.Port), v.Protocol)
		}
	}
	for i := range v.Backends {
		if v.Backends[i].Weight == 0 {
			v.Backends[i].Weight = 1
		}
	}
	if h := v.Health; h != nil {
		if h.Port == 0 {
			h.Port = v.Port
		}
		if h.Type == "http" {
			if h.Path == "" {
				h.Path = "/"
			}
			if h.ExpectStatus == 0 {
				h.ExpectStatus = 200
			}
		}
		if h.Interval == 0 {
			h.Interval = Duration(2 * time.Second)
		}
		if h.Timeout == 0 {
			h.Timeout = Duration(time.Second)
			if h.Timeout > h.Interval {
				h.Timeout = h.Interval
			}
		}
		if h.Rise == 0 {
			h.Rise = 2
		}
		if h.Fall == 0 {
			h.Fall = 3
		}
	}
}

// checkHash checks a hash option.
func checkHash(s string) error {
	switch s {
	case "", HashFiveTuple, HashSourceOnly, HashNoSourcePort:
		return nil
	}
	return fmt.Errorf("unknown hash %q: use five-tuple, source-only or no-source-port", s)
}

// Protocols of a VIP.
const (
	ProtocolTCP = "tcp"
	ProtocolUDP = "udp"
)

// Proto is the VIP's protocol, tcp or udp, in lower case as the forwarder's maps spell it ("" when
// it is neither: the VIP is not valid).
func (v *VIP) Proto() string { return protocol(v.Protocol) }

// protocol is p's canonical spelling, or "" when p names no protocol.
func protocol(p string) string {
	switch p {
	case "tcp", "TCP":
		return ProtocolTCP
	case "udp", "UDP":
		return ProtocolUDP
	}
	return ""
}

// vipKey is what tells VIPs apart in the forwarder: address, port and protocol.
type vipKey struct {
	ap    netip.AddrPort
	proto string
}

func (k vipKey) String() string { return k.ap.String() + "/" + k.proto }

// key is the VIP's vipKey; the VIP must be valid.
func (v *VIP) key() vipKey { return vipKey{netip.AddrPortFrom(v.Addr(), v.Port), v.Proto()} }

// FindVIP finds a VIP by name or by "address:port/protocol" (or "address:port", tcp assumed).
func (c *Config) FindVIP(ref string) (int, error) {
	for i := range c.VIPs {
		if c.VIPs[i].Name == ref {
			return i, nil
		}
	}
	if k, err := parseVIPRef(ref); err == nil {
		for i := range c.VIPs {
			if c.VIPs[i].key() == k {
				return i, nil
			}
		}
	}
	names := make([]string, len(c.VIPs))
	for i, v := range c.VIPs {
		names[i] = v.Name
	}
	if len(names) == 0 {
		return -1, fmt.Errorf("unknown vip %q: no VIP is configured; add one with `switchyard vip add`", ref)
	}
	return -1, fmt.Errorf("unknown vip %q: give a name or address:port/protocol (configured: %s; see `switchyard vip list`)", ref, strings.Join(names, ", "))
}

// parseVIPRef reads "address[:port][/protocol]"; a bare IPv6 address needs no brackets.
func parseVIPRef(s string) (vipKey, error) {
	proto := ProtocolTCP
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		if proto = protocol(s[i+1:]); proto == "" {
			return vipKey{}, fmt.Errorf("parse protocol %q: use tcp or udp", s[i+1:])
		}
		s = s[:i]
	}
	a, port, err := ParseAddrPort(s)
	if err != nil {
		return vipKey{}, err
	}
	return vipKey{netip.AddrPortFrom(a, port), proto}, nil
}

// ParseAddrPort reads "a.b.c.d:port", "[v6]:port" or a bare address (port 0).
func ParseAddrPort(s string) (netip.Addr, uint16, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), ap.Port(), nil
	}
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return netip.Addr{}, 0, fmt.Errorf("invalid address %q: use 198.18.100.1, 198.18.100.1:80 or [fd00:5e::1]:80", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, 0, fmt.Errorf("invalid address %q: zones are not supported", s)
	}
	return a.Unmap(), 0, nil
}

// FindBackend finds a backend of a VIP by address.
func (v *VIP) FindBackend(addr string) (int, error) {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return -1, fmt.Errorf("invalid backend address %q: use an IPv4 or IPv6 address such as 198.18.3.1", addr)
	}
	for i, b := range v.Backends {
		if ba, err := netip.ParseAddr(b.Address); err == nil && ba.Unmap() == a.Unmap() {
			return i, nil
		}
	}
	return -1, fmt.Errorf("unknown backend %s in vip %s: see `switchyard backend list %s`", addr, v.Name, v.Name)
}

// itoa is strconv.Itoa, named for the field paths.
func itoa(i int) string { return strconv.Itoa(i) }
