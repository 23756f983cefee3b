package api

import (
	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/maps"
)

// The DDoS guard's operations (`switchyard guard`, docs/xdp.md "The guard").
const (
	OpGuardList   = "guard/list"
	OpGuardAdd    = "guard/add"
	OpGuardRemove = "guard/remove"
	OpGuardLimit  = "guard/limit"
)

// Guard lists names a guard's lists.
const (
	GuardAllow = "allow"
	GuardDeny  = "deny"
)

// GuardRuleReq adds or removes an allow or deny prefix, of a VIP or ("" VIP) of every VIP.
type GuardRuleReq struct {
	VIP    string `json:"vip,omitempty"`
	List   string `json:"list"` // allow or deny
	Prefix string `json:"prefix"`
}

// GuardLimitReq sets or (nil) clears a VIP's or ("" VIP) the global per-source and per-VIP
// limits; only the kinds named in Set change.
type GuardLimitReq struct {
	VIP       string              `json:"vip,omitempty"`
	Set       []string            `json:"set"` // "per_source", "per_vip"
	PerSource *config.SourceLimit `json:"per_source,omitempty"`
	PerVIP    *config.Limit       `json:"per_vip,omitempty"`
}

// GuardInfo is `guard list`: the global guard, each guarded VIP's own, and the counters.
type GuardInfo struct {
	Global *config.Guard            `json:"global,omitempty"`
	VIPs   map[string]*config.Guard `json:"vips,omitempty"`
	// Counters are the guard's counters by name (maps.GuardCounterNames, and
	// source_buckets_evicted), summed over CPUs.
	Counters map[string]maps.Counter `json:"counters"`
}
