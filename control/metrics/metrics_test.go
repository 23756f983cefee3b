package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard/switchyard/control/api"
	"github.com/switchyard/switchyard/maps"
)

func TestCollector(t *testing.T) {
	snap := Snapshot{
		Stats: api.Stats{
			Counters: map[string]maps.Counter{"tx": {Packets: 10, Bytes: 1000}, "drop": {Packets: 1, Bytes: 60}},
			VIPs:     []api.VIPStats{{Name: "web", Traffic: api.Traffic{Packets: 10, Bytes: 1000}, ActiveFlows: 3}},
			Backends: []api.BackendStats{{Address: "198.18.3.1", Traffic: api.Traffic{Packets: 7, Bytes: 700}}},
			Flows:    5,
			Guard:    map[string]maps.Counter{"deny": {Packets: 12}, "source_rate": {Packets: 5}, "foreign_mac_passed": {Packets: 2}},
		},
		Backends: []api.BackendInfo{
			{VIP: "web", Address: "198.18.3.1", State: api.StateActive, Health: "healthy", HealthMode: "tunnel", Weight: 2, ActiveFlows: 2, RingShare: 0.66},
			{VIP: "web", Address: "198.18.3.2", State: api.StateDraining, Health: "unhealthy", Weight: 1, ActiveFlows: 1},
		},
		RingRebuilds: 4, SlotsWritten: 1234, Reloads: 2, ReloadErrors: 1, ProbesOK: 9, ProbesFailed: 3, NextHopResolved: true,
		ProbesByMode:  map[string][2]uint64{"tunnel": {8, 3}, "direct": {1, 0}},
		TunnelPackets: map[string]uint64{"probe_ipip": 40, "probe_no_target": 1},
	}
	c := NewCollector(func() Snapshot { return snap })
	reg := prometheus.NewPedanticRegistry() // checks what is collected against the descriptors
	reg.MustRegister(c)
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	text := rec.Body.String()
	for _, line := range []string{
		`switchyard_l4_backend_state{backend="198.18.3.1",state="active",vip="web"} 1`,
		`switchyard_l4_backend_state{backend="198.18.3.1",state="draining",vip="web"} 0`,
		`switchyard_l4_backend_state{backend="198.18.3.2",state="draining",vip="web"} 1`,
		`switchyard_l4_backend_healthy{backend="198.18.3.1",vip="web"} 1`,
		`switchyard_l4_backend_healthy{backend="198.18.3.2",vip="web"} 0`,
		`switchyard_l4_backend_active_flows{backend="198.18.3.1",vip="web"} 2`,
		`switchyard_l4_xdp_packets_total{counter="tx"} 10`,
		`switchyard_l4_xdp_bytes_total{counter="drop"} 60`,
		`switchyard_l4_vip_active_flows{vip="web"} 3`,
		`switchyard_l4_backend_packets_total{backend="198.18.3.1"} 7`,
		`switchyard_l4_config_reloads_total 2`,
		`switchyard_l4_config_reload_errors_total 1`,
		`switchyard_l4_ring_slots_written_total 1234`,
		`switchyard_l4_health_probes_total{result="fail"} 3`,
		`switchyard_l4_next_hop_resolved 1`,
		`switchyard_l4_backend_health_mode{backend="198.18.3.1",mode="tunnel",vip="web"} 1`,
		`switchyard_l4_health_mode_probes_total{mode="tunnel",result="fail"} 3`,
		`switchyard_l4_health_mode_probes_total{mode="direct",result="ok"} 1`,
		`switchyard_l4_health_tunnel_packets_total{counter="probe_ipip"} 40`,
		`switchyard_l4_guard_drops_total{reason="deny"} 12`,
		`switchyard_l4_guard_drops_total{reason="source_rate"} 5`,
		`switchyard_l4_guard_events_total{event="foreign_mac_passed"} 2`,
		`switchyard_l4_conntrack_entries 5`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("scrape lacks %s", line)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "switchyard_l4_") {
			t.Errorf("metric %s lacks the switchyard_l4_ prefix", mf.GetName())
		}
	}
}

// TestStoreAndDigestMetrics: the fleet metrics are there with a store, and absent without one.
func TestStoreAndDigestMetrics(t *testing.T) {
	now := time.Now()
	snap := Snapshot{
		Rings: []api.RingDigest{{VIP: "web", Digest: "00000000002a", Value: 42}},
		Store: &api.StoreStatus{Connected: false, Since: now.Add(-90 * time.Second), Revision: 17, WatchedRevision: 18,
			Events: 5, Resyncs: 1, Writes: 3, WriteConflicts: 2, Refusals: 1},
		Now: now,
	}
	scrape := func(s Snapshot) string {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(NewCollector(func() Snapshot { return s }))
		rec := httptest.NewRecorder()
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
		}
		return rec.Body.String()
	}
	text := scrape(snap)
	for _, line := range []string{
		`switchyard_l4_vip_ring_digest{vip="web"} 42`,
		`switchyard_l4_store_connected 0`,
		`switchyard_l4_store_disconnected_seconds 90`,
		`switchyard_l4_store_revision 17`,
		`switchyard_l4_store_watched_revision 18`,
		`switchyard_l4_store_resyncs_total 1`,
		`switchyard_l4_store_writes_total{result="conflict"} 2`,
		`switchyard_l4_store_refusals_total 1`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("scrape lacks %s", line)
		}
	}
	if text := scrape(Snapshot{}); strings.Contains(text, "switchyard_l4_store_") {
		t.Errorf("store metrics without a store")
	}
}
