// Package api is the control protocol between the balancer daemon and the CLI: JSON over HTTP
// over a root-only unix socket. Every operation is a POST to /v1/<operation> with a JSON request
// and answers a JSON result, or an error status with {"error": "..."} that names the problem and
// the fix.
package api

import (
	"time"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/maps"
)

// Operation names (the path after /v1/).
const (
	OpStatus         = "status"
	OpVIPList        = "vip/list"
	OpVIPAdd         = "vip/add"
	OpVIPRemove      = "vip/remove"
	OpVIPBGP         = "vip/bgp"
	OpBackendList    = "backend/list"
	OpBackendAdd     = "backend/add"
	OpBackendRemove  = "backend/remove"
	OpBackendDrain   = "backend/drain"
	OpBackendUndrain = "backend/undrain"
	OpBackendWeight  = "backend/weight"
	OpHealth         = "health"
	OpStats          = "stats"
	OpFlow           = "flow"
	OpConfigSave     = "config/save"
	OpConfigReload   = "config/reload"
)

// Backend states shown by `backend list`.
const (
	// StateActive takes new flows.
	StateActive = "active"
	// StateDraining takes no new flow; its established flows continue until the drain timeout.
	StateDraining = "draining"
	// StateDrained is drained and past the drain timeout: its flows were cut, safe to remove.
	StateDrained = "drained"
	// StateUnhealthy failed its checks: out of the ring (unless every backend is down and the
	// policy is keep), established flows continue.
	StateUnhealthy = "unhealthy"
	// StateAllDownKept is unhealthy but kept in the ring by the all_backends_down: keep policy.
	StateAllDownKept = "unhealthy-kept"
)

// Empty is the request of operations without arguments.
type Empty struct{}

// Status describes the running daemon.
type Status struct {
	Interface  string    `json:"interface"`
	XDPMode    string    `json:"xdp_mode"`
	PinDir     string    `json:"pin_dir"`
	Config     string    `json:"config,omitempty"`
	LinkID     uint32    `json:"link_id"`
	ProgramID  uint32    `json:"program_id"`
	Adopted    bool      `json:"adopted"`
	Gateway    string    `json:"gateway,omitempty"`
	NextHopMAC string    `json:"next_hop_mac,omitempty"`
	IfMAC      string    `json:"if_mac,omitempty"`
	MTU        int       `json:"mtu"`
	VIPs       int       `json:"vips"`
	Backends   int       `json:"backends"`
	Started    time.Time `json:"started"`
	Version    string    `json:"version,omitempty"`
	// BGP is the announcement state (bgp.go); nil without a bgp section.
	BGP *BGPStatus `json:"bgp,omitempty"`
	// Rings has one digest per VIP of the Maglev table this node wrote: equal digests on two
	// nodes mean identical tables (slot by slot, by backend address).
	Rings []RingDigest `json:"rings"`
	// Store is the fleet store's state; nil when the VIPs come from the configuration file.
	Store *StoreStatus `json:"store,omitempty"`
}

// RingDigest identifies the Maglev table of one VIP as written into the maps.
type RingDigest struct {
	VIP string `json:"vip"`
	// Digest is 48 bits of FNV-1a over every slot's backend address, in hex (the metric
	// switchyard_l4_vip_ring_digest has the same value as a number).
	Digest string `json:"digest"`
	// Value is Digest as a number.
	Value uint64 `json:"value"`
	// InRing counts the backends that hold slots.
	InRing int `json:"in_ring"`
	// Previous is the digest of the second-chance previous ring ("" when it is empty): equal
	// on nodes that applied the same sequence of tables.
	Previous string `json:"previous,omitempty"`
}

// StoreStatus is the state of the fleet store (`lb run --store`).
type StoreStatus struct {
	URL string `json:"url"`
	// Connected is true while the store answers reads that need a quorum.
	Connected bool `json:"connected"`
	// Since is when the current connected or disconnected state began.
	Since time.Time `json:"since"`
	// Revision is the store revision of the VIPs in effect on this node.
	Revision int64 `json:"revision"`
	// WatchedRevision is the last revision the watch delivered (ahead of Revision when that
	// snapshot was refused); StoreRevision the store's at the last probe.
	WatchedRevision int64 `json:"watched_revision"`
	StoreRevision   int64 `json:"store_revision"`
	// Refused says why the last snapshot delivered was not applied ("" when it is in effect).
	Refused   string `json:"refused,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// Events, Rewatches (resumed from the last revision) and Resyncs (full re-lists).
	Events    uint64 `json:"events"`
	Rewatches uint64 `json:"rewatches"`
	Resyncs   uint64 `json:"resyncs"`
	// Writes by result: ok, conflict (retried on a fresh snapshot), error.
	Writes         uint64 `json:"writes"`
	WriteConflicts uint64 `json:"write_conflicts"`
	WriteErrors    uint64 `json:"write_errors"`
	// Refusals counts snapshots not applied (invalid, or refused by the maps).
	Refusals uint64 `json:"refusals"`
}

// VIPRef names a VIP: its name or address:port/protocol.
type VIPRef struct {
	VIP string `json:"vip"`
}

// VIPAdd adds a VIP (with its backends, if any).
type VIPAdd struct {
	VIP config.VIP `json:"vip"`
}

// VIPBGPReq replaces a VIP's bgp section (route policy, announce_from, overrides); nil removes it.
type VIPBGPReq struct {
	VIP string         `json:"vip"`
	BGP *config.VIPBGP `json:"bgp"`
}

// VIPInfo is one row of `vip list`.
type VIPInfo struct {
	Name     string              `json:"name"`
	Address  string              `json:"address"`
	Port     uint16              `json:"port"`
	Protocol string              `json:"protocol"`
	Hash     string              `json:"hash"`
	ID       uint32              `json:"id"`
	Health   *config.HealthCheck `json:"health,omitempty"`
	Backends int                 `json:"backends"`
	InRing   int                 `json:"in_ring"`
	// RingDigest is the digest of the VIP's Maglev table (see RingDigest).
	RingDigest string `json:"ring_digest"`
}

// BackendReq names a backend of a VIP; Weight is used by add and weight.
type BackendReq struct {
	VIP     string `json:"vip"`
	Address string `json:"address"`
	Weight  uint32 `json:"weight,omitempty"`
	// ServerID is a new backend's QUIC server ID (backend add; 0: its backend id).
	ServerID uint32 `json:"server_id,omitempty"`
}

// BackendInfo is one row of `backend list`.
type BackendInfo struct {
	VIP     string `json:"vip"`
	Address string `json:"address"`
	ID      uint32 `json:"id"`
	Weight  uint32 `json:"weight"`
	State   string `json:"state"`
	InRing  bool   `json:"in_ring"`
	// Health is "healthy", "unhealthy", "unchecked" (no check) or "pending" (no probe yet).
	Health string `json:"health"`
	// HealthMode is how the check reaches the backend: "tunnel" or "direct" (empty: unchecked).
	HealthMode  string `json:"health_mode,omitempty"`
	ActiveFlows int    `json:"active_flows"`
	// DrainLeft is the time until the drain timeout cuts the remaining flows.
	DrainLeft time.Duration `json:"drain_left_ns,omitempty"`
	// RingShare is the fraction of ring slots it holds.
	RingShare float64 `json:"ring_share"`
	// ServerID is its QUIC server ID when the VIP routes QUIC by connection ID (else 0).
	ServerID uint32 `json:"server_id,omitempty"`
}

// HealthInfo is one row of `lb health`.
type HealthInfo struct {
	VIP     string `json:"vip"`
	Backend string `json:"backend"`
	Check   string `json:"check"`
	// Mode is "tunnel" (the VIP, encapsulated toward the backend) or "direct" (its own address).
	Mode      string    `json:"mode"`
	Healthy   bool      `json:"healthy"`
	Checked   bool      `json:"checked"`
	Successes int       `json:"successes"`
	Failures  int       `json:"failures"`
	LastError string    `json:"last_error,omitempty"`
	Since     time.Time `json:"since"`
}

// Traffic is a counter with its rate over the daemon's last sampling interval.
type Traffic struct {
	Packets uint64  `json:"packets"`
	Bytes   uint64  `json:"bytes"`
	PPS     float64 `json:"pps"`
	BPS     float64 `json:"bps"`
}

// VIPStats is a VIP's traffic.
type VIPStats struct {
	Name string `json:"name"`
	ID   uint32 `json:"id"`
	Traffic
	ActiveFlows int `json:"active_flows"`
	// Dropped is the packets (and bytes) toward the VIP that the forwarder dropped, for any
	// reason (the reasons are the drop_* counters).
	Dropped maps.Counter `json:"dropped"`
}

// BackendStats is a backend address's traffic (over every VIP it serves).
type BackendStats struct {
	Address string `json:"address"`
	ID      uint32 `json:"id"`
	Traffic
	ActiveFlows int `json:"active_flows"`
}

// Stats is the answer of `lb stats`.
type Stats struct {
	Counters map[string]maps.Counter `json:"counters"`
	VIPs     []VIPStats              `json:"vips"`
	Backends []BackendStats          `json:"backends"`
	// Flows is the number of connection-table entries (closing and idle included).
	Flows int `json:"flows"`
	// Interval is the sampling interval of the rates.
	Interval time.Duration `json:"interval_ns"`
	// Guard are the DDoS guard's counters by name (maps.GuardCounterNames, and
	// source_buckets_evicted), summed over CPUs.
	Guard map[string]maps.Counter `json:"guard,omitempty"`
}

// FlowReq is a 5-tuple: protocol, client address:port, VIP address:port.
type FlowReq struct {
	Proto string `json:"proto"`
	Src   string `json:"src"`
	Dst   string `json:"dst"`
}

// FlowInfo explains which backend a flow gets.
type FlowInfo struct {
	Flow string `json:"flow"`
	VIP  string `json:"vip"`
	// Backend is the backend the next packet goes to ("" when none: dropped).
	Backend   string `json:"backend"`
	BackendID uint32 `json:"backend_id"`
	// Reason is "connection table" or "maglev slot" (a new flow, or an entry that no longer
	// applies), or "no backend".
	Reason string `json:"reason"`
	// Slot is the flow's Maglev slot; RingBackend is the backend in it (what a SYN gets).
	Slot        uint32 `json:"slot"`
	RingBackend string `json:"ring_backend"`
	Tracked     bool   `json:"tracked"`
	Closing     bool   `json:"closing,omitempty"`
	// Idle is the time since the entry was last refreshed.
	Idle time.Duration `json:"idle_ns,omitempty"`
	// SecondChance is the backend every packet of the tracked flow carries as its second
	// candidate ("" when none; docs/xdp.md, "Second chance").
	SecondChance string `json:"second_chance,omitempty"`
	Note         string `json:"note,omitempty"`
}

// SaveReq asks to write the running configuration; an empty Path means the file it came from.
type SaveReq struct {
	Path string `json:"path,omitempty"`
}

// SaveResult says where the configuration went.
type SaveResult struct {
	Path string `json:"path"`
}

// ChangeResult is the answer of every change: what the maps saw and where it persisted.
type ChangeResult struct {
	Message      string `json:"message"`
	SlotsWritten int    `json:"slots_written"`
	Saved        string `json:"saved,omitempty"`
}
