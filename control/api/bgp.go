package api

import "time"

// OpDrainNode withdraws every VIP, keeps forwarding the established flows for a grace period,
// then detaches the program and ends the daemon (`lb drain-node`).
const OpDrainNode = "node/drain"

// Announcement states of a VIP.
const (
	AnnounceYes = "announced"
	AnnounceNo  = "withdrawn"
)

// BGPStatus is the BGP part of `lb status` (nil without a bgp section).
type BGPStatus struct {
	ASN      uint32 `json:"asn"`
	RouterID string `json:"router_id"`
	// Ready is true while the program is attached and the maps are reconciled: only a ready node
	// announces.
	Ready    bool `json:"ready"`
	Draining bool `json:"draining"`
	// Depref is set while `drain-node --depref` announces the VIPs with bgp.depref_med, before
	// the withdrawal.
	Depref bool `json:"depref,omitempty"`
	// DrainLeft is the time until the draining node detaches.
	DrainLeft time.Duration     `json:"drain_left_ns,omitempty"`
	Sessions  []BGPSession      `json:"sessions"`
	VIPs      []VIPAnnouncement `json:"vips"`
	// Announced are the prefixes in the local RIB (sent to every established session).
	Announced []string `json:"announced"`
}

// BGPSession is one router's session.
type BGPSession struct {
	Peer        string        `json:"peer"`
	ASN         uint32        `json:"asn"`
	State       string        `json:"state"`
	Established bool          `json:"established"`
	Uptime      time.Duration `json:"uptime_ns,omitempty"`
	// PrefixesSent is what the router was sent and holds; UpdatesSent counts UPDATE messages.
	PrefixesSent uint64 `json:"prefixes_sent"`
	UpdatesSent  uint64 `json:"updates_sent"`
	HoldTime     uint64 `json:"hold_time_s,omitempty"`
	// BFD is the session's BFD state (nil when the peer has no bfd).
	BFD *BGPBFD `json:"bfd,omitempty"`
	// GracefulRestart is true when both sides announced it on the established session;
	// RestartTime is what this node announces (0: off).
	GracefulRestart bool   `json:"graceful_restart"`
	RestartTime     uint32 `json:"restart_time_s,omitempty"`
	// LastDownReason is why the session last went down (a NOTIFICATION, BFD, the hold timer).
	LastDownReason string `json:"last_down_reason,omitempty"`
}

// BGPBFD is a peer's BFD session.
type BGPBFD struct {
	// State is up, down, init or admin-down.
	State string `json:"state"`
	// Failures counts the times it went down from up.
	Failures   uint64        `json:"failures"`
	Sent       uint64        `json:"packets_sent"`
	Received   uint64        `json:"packets_received"`
	DetectTime time.Duration `json:"detect_time_ns"`
}

// VIPAnnouncement is whether a VIP's prefix is announced, and why (not).
type VIPAnnouncement struct {
	VIP    string `json:"vip"`
	Prefix string `json:"prefix"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	// Policy is the route policy this node announces the VIP with (communities, large
	// communities, local_pref, med; "" for none).
	Policy string `json:"policy,omitempty"`
}

// DrainNodeReq asks for a drain; a zero Grace takes bgp.drain_grace. Depref first announces
// every prefix with bgp.depref_med for DeprefWait, then withdraws.
type DrainNodeReq struct {
	Grace      time.Duration `json:"grace_ns,omitempty"`
	Depref     bool          `json:"depref,omitempty"`
	DeprefWait time.Duration `json:"depref_wait_ns,omitempty"`
}

// DrainNodeResult says what was withdrawn and when the node detaches.
type DrainNodeResult struct {
	Message   string        `json:"message"`
	Withdrawn []string      `json:"withdrawn"`
	Grace     time.Duration `json:"grace_ns"`
	DetachAt  time.Time     `json:"detach_at"`
}
