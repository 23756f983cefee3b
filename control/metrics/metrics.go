// Package metrics exports the L4 balancer's state as Prometheus metrics with switchyard_l4_
// names: data-plane counters summed over CPUs, per VIP and per backend traffic and active flows,
// backend states and health, table rebuilds, reloads and probe counts. Values are read at scrape
// time from a snapshot function, so nothing is duplicated between the maps and the metrics.
package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/maps"
)

// Snapshot is what one scrape exports.
type Snapshot struct {
	Stats    api.Stats
	Backends []api.BackendInfo
	// ReadError is set when the counters could not be read (the scrape exports what it has).
	ReadError                                            bool
	RingRebuilds, SlotsWritten                           uint64
	Reloads, ReloadErrors, ApplyErrors                   uint64
	HealthChanges, DrainsExpired, ProbesOK, ProbesFailed uint64
	NextHopResolved                                      bool
	// ProbesByMode are the probe counts of each health mode (tunnel, direct): {ok, fail}.
	ProbesByMode map[string][2]uint64
	// TunnelPackets are the probe encapsulator's counters by name (nil when it is not loaded).
	TunnelPackets map[string]uint64
	// Rings are the per-VIP digests of the Maglev tables written.
	Rings []api.RingDigest
	// Store is the fleet store's state (nil without one).
	Store *api.StoreStatus
	// Now is the time of the scrape (for the disconnected duration).
	Now time.Time
}

// Collector is a prometheus.Collector over a snapshot function.
type Collector struct {
	snap func() Snapshot
}

// NewCollector makes a collector; snap is called once per scrape.
func NewCollector(snap func() Snapshot) *Collector { return &Collector{snap: snap} }

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("switchyard_l4_"+name, help, labels, nil)
}

var (
	dPackets       = desc("xdp_packets_total", "Packets counted by the XDP forwarder, by counter (verdicts tx/pass/drop and events), summed over CPUs.", "counter")
	dBytes         = desc("xdp_bytes_total", "Bytes counted by the XDP forwarder, by counter, summed over CPUs.", "counter")
	dVIPPackets    = desc("vip_packets_total", "Packets forwarded for a VIP.", "vip")
	dVIPBytes      = desc("vip_bytes_total", "Bytes (inner IP) forwarded for a VIP.", "vip")
	dVIPFlows      = desc("vip_active_flows", "Active (not closing, recently seen) connection-table entries of a VIP.", "vip")
	dVIPDropped    = desc("vip_dropped_packets_total", "Packets toward a VIP that the forwarder dropped (any reason: see xdp_packets_total's drop_* counters).", "vip")
	dBEPackets     = desc("backend_packets_total", "Packets forwarded to a backend address (over every VIP).", "backend")
	dBEBytes       = desc("backend_bytes_total", "Bytes (inner IP) forwarded to a backend address.", "backend")
	dBEFlows       = desc("backend_active_flows", "Active connection-table entries of a backend of a VIP.", "vip", "backend")
	dBEState       = desc("backend_state", "1 for the backend's current state (active, draining, drained, unhealthy, unhealthy-kept).", "vip", "backend", "state")
	dBEHealthy     = desc("backend_healthy", "1 when the backend passes its health check (or has none), else 0.", "vip", "backend")
	dBEWeight      = desc("backend_weight", "Configured weight of the backend.", "vip", "backend")
	dBEShare       = desc("backend_ring_share", "Fraction of the VIP's Maglev ring slots held by the backend.", "vip", "backend")
	dFlows         = desc("conntrack_entries", "Entries in the connection table (closing and idle included).")
	dRebuilds      = desc("ring_rebuilds_total", "Maglev rings rewritten (at least one slot changed).")
	dSlots         = desc("ring_slots_written_total", "Maglev ring slots written.")
	dReloads       = desc("config_reloads_total", "Configuration reloads (SIGHUP or `lb config reload`).")
	dReloadErrors  = desc("config_reload_errors_total", "Configuration reloads refused (the running state was kept).")
	dApplyErrors   = desc("apply_errors_total", "Map reconciliations that failed.")
	dHealthChanges = desc("health_changes_total", "Backend health state changes.")
	dProbes        = desc("health_probes_total", "Health probes run, by result.", "result")
	dProbesMode    = desc("health_mode_probes_total", "Health probes run, by mode (tunnel: to the VIP through the tunnel; direct: to the backend's own address) and result.", "mode", "result")
	dTunnelPkts    = desc("health_tunnel_packets_total", "Probe packets seen by the probe encapsulator on the balanced interface's egress, by outcome (probe_ipip, probe_4in6, probe_ip6ip6 sent; probe_no_target, probe_error dropped).", "counter")
	dBEHealthMode  = desc("backend_health_mode", "1 for the mode of the backend's health check (tunnel or direct); no series for an unchecked backend.", "vip", "backend", "mode")
	dDrains        = desc("drain_timeouts_total", "Drains that reached drain_timeout.")
	dNextHop       = desc("next_hop_resolved", "1 when the next hop MAC is resolved.")
	dRingDigest    = desc("vip_ring_digest", "48-bit digest of the VIP's Maglev table as written (by backend address): equal on every node of a fleet that agrees.", "vip")
	dStoreUp       = desc("store_connected", "1 while the fleet store answers quorum reads, else 0 (the node forwards with its last state).")
	dStoreDown     = desc("store_disconnected_seconds", "Seconds since the fleet store became unreachable (0 while connected).")
	dStoreRev      = desc("store_revision", "Store revision of the VIPs in effect on this node.")
	dStoreWatched  = desc("store_watched_revision", "Last store revision the watch delivered.")
	dStoreEvents   = desc("store_events_total", "Watch events received from the fleet store.")
	dStoreResyncs  = desc("store_resyncs_total", "Full re-lists of the store (the revision to resume from was compacted).")
	dStoreRewatch  = desc("store_rewatches_total", "Watches resumed from the last revision after an error.")
	dStoreWrites   = desc("store_writes_total", "CLI changes written to the store, by result (ok, conflict: retried on a fresh listing, error).", "result")
	dGuardDrops    = desc("guard_drops_total", "New flows the XDP guard dropped, by reason (deny: a deny rule; source_rate: the source prefix's bucket was empty; vip_rate: the VIP's bucket was empty), summed over CPUs.", "reason")
	dGuardEvents   = desc("guard_events_total", "Other events of the XDP guard: allowed (exempted by an allow rule), source_buckets_made, source_buckets_evicted (made less present), foreign_mac_passed (toward a VIP but not to this balancer's MAC), unconfirmed_promoted (a SYN's entry confirmed by the flow's next packet).", "event")
	dStoreRefused  = desc("store_refusals_total", "Store snapshots not applied (invalid, or refused by the maps); the running state stayed.")
)

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dPackets, dBytes, dVIPPackets, dVIPBytes, dVIPFlows, dVIPDropped, dBEPackets, dBEBytes, dBEFlows,
		dBEState, dBEHealthy, dBEWeight, dBEShare, dFlows, dRebuilds, dSlots, dReloads, dReloadErrors, dApplyErrors,
		dHealthChanges, dProbes, dProbesMode, dTunnelPkts, dBEHealthMode, dDrains, dNextHop, dRingDigest, dStoreUp, dStoreDown, dStoreRev, dStoreWatched,
		dStoreEvents, dStoreResyncs, dStoreRewatch, dStoreWrites, dStoreRefused, dGuardDrops, dGuardEvents} {
		ch <- d
	}
}

// States lists every backend state, so each gets a 0 or 1 series.
var States = []string{api.StateActive, api.StateDraining, api.StateDrained, api.StateUnhealthy, api.StateAllDownKept}

// Collect reads a snapshot and sends it.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap()
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	for name, v := range s.Stats.Counters {
		counter(dPackets, float64(v.Packets), name)
		counter(dBytes, float64(v.Bytes), name)
	}
	for name, v := range s.Stats.Guard {
		if slices.Contains(maps.GuardDropReasons, name) {
			counter(dGuardDrops, float64(v.Packets), name)
		} else {
			counter(dGuardEvents, float64(v.Packets), name)
		}
	}
	for _, v := range s.Stats.VIPs {
		counter(dVIPPackets, float64(v.Packets), v.Name)
		counter(dVIPBytes, float64(v.Bytes), v.Name)
		gauge(dVIPFlows, float64(v.ActiveFlows), v.Name)
		counter(dVIPDropped, float64(v.Dropped.Packets), v.Name)
	}
	for _, b := range s.Stats.Backends {
		counter(dBEPackets, float64(b.Packets), b.Address)
		counter(dBEBytes, float64(b.Bytes), b.Address)
	}
	for _, b := range s.Backends {
		gauge(dBEFlows, float64(b.ActiveFlows), b.VIP, b.Address)
		for _, st := range States {
			gauge(dBEState, b2f(b.State == st), b.VIP, b.Address, st)
		}
		gauge(dBEHealthy, b2f(b.Health != "unhealthy"), b.VIP, b.Address)
		if b.HealthMode != "" {
			gauge(dBEHealthMode, 1, b.VIP, b.Address, b.HealthMode)
		}
		gauge(dBEWeight, float64(b.Weight), b.VIP, b.Address)
		gauge(dBEShare, b.RingShare, b.VIP, b.Address)
	}
	gauge(dFlows, float64(s.Stats.Flows))
	counter(dRebuilds, float64(s.RingRebuilds))
	counter(dSlots, float64(s.SlotsWritten))
	counter(dReloads, float64(s.Reloads))
	counter(dReloadErrors, float64(s.ReloadErrors))
	counter(dApplyErrors, float64(s.ApplyErrors))
	counter(dHealthChanges, float64(s.HealthChanges))
	counter(dProbes, float64(s.ProbesOK), "ok")
	counter(dProbes, float64(s.ProbesFailed), "fail")
	for mode, n := range s.ProbesByMode {
		counter(dProbesMode, float64(n[0]), mode, "ok")
		counter(dProbesMode, float64(n[1]), mode, "fail")
	}
	for name, n := range s.TunnelPackets {
		counter(dTunnelPkts, float64(n), name)
	}
	counter(dDrains, float64(s.DrainsExpired))
	gauge(dNextHop, b2f(s.NextHopResolved))
	for _, r := range s.Rings {
		gauge(dRingDigest, float64(r.Value), r.VIP)
	}
	if st := s.Store; st != nil {
		gauge(dStoreUp, b2f(st.Connected))
		down := 0.0
		if !st.Connected && !s.Now.IsZero() {
			down = s.Now.Sub(st.Since).Seconds()
		}
		gauge(dStoreDown, down)
		gauge(dStoreRev, float64(st.Revision))
		gauge(dStoreWatched, float64(st.WatchedRevision))
		counter(dStoreEvents, float64(st.Events))
		counter(dStoreResyncs, float64(st.Resyncs))
		counter(dStoreRewatch, float64(st.Rewatches))
		counter(dStoreWrites, float64(st.Writes), "ok")
		counter(dStoreWrites, float64(st.WriteConflicts), "conflict")
		counter(dStoreWrites, float64(st.WriteErrors), "error")
		counter(dStoreRefused, float64(st.Refusals))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
