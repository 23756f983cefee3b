package bgp

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("switchyard_l4_bgp_"+name, help, labels, nil)
}

var (
	dState       = desc("session_state", "1 for the BGP session's current state (idle, connect, active, opensent, openconfirm, established).", "peer", "state")
	dUp          = desc("session_established", "1 when the BGP session with the peer is established, else 0.", "peer")
	dUptime      = desc("session_uptime_seconds", "Time since the BGP session was established (0 when down).", "peer")
	dSent        = desc("prefixes_sent", "Prefixes the peer was sent and holds.", "peer")
	dUpdates     = desc("updates_sent_total", "BGP UPDATE messages sent to the peer (over the current and earlier sessions).", "peer")
	dAnnounced   = desc("announced_prefixes", "VIP prefixes in the local RIB, announced to every established peer.")
	dAnnounce    = desc("announcements_total", "Prefixes added to the local RIB.")
	dWithdraw    = desc("withdrawals_total", "Prefixes withdrawn from the local RIB.")
	dReplace     = desc("attribute_changes_total", "Prefixes announced again because their route policy (communities, MED, LOCAL_PREF) changed.")
	dRIBErrors   = desc("rib_errors_total", "Changes of the local RIB that GoBGP refused (retried).")
	dBFDState    = desc("bfd_state", "1 for the peer's BFD session state (down, init, up, admin-down); absent without BFD.", "peer", "state")
	dBFDUp       = desc("bfd_up", "1 when the BFD session with the peer is up, else 0; absent without BFD.", "peer")
	dBFDFailures = desc("bfd_failures_total", "Times the BFD session went down from up (each resets the BGP session at once).", "peer")
	dBFDPackets  = desc("bfd_packets_total", "BFD control packets sent and received.", "peer", "direction")
	dBFDDetect   = desc("bfd_detect_seconds", "Configured BFD detection time: multiplier x min_rx.", "peer")
	dGR          = desc("graceful_restart", "1 when graceful restart was negotiated on the established session (the router keeps the routes for the restart time if this speaker dies).", "peer")
	collectorAll = []*prometheus.Desc{dState, dUp, dUptime, dSent, dUpdates, dAnnounced, dAnnounce, dWithdraw, dReplace, dRIBErrors,
		dBFDState, dBFDUp, dBFDFailures, dBFDPackets, dBFDDetect, dGR}
)

// Describe sends every descriptor: the speaker is a prometheus.Collector.
func (s *Speaker) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range collectorAll {
		ch <- d
	}
}

// Collect reads the sessions and counters at scrape time.
func (s *Speaker) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sessions, _ := s.Sessions(ctx)
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	c := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	for _, se := range sessions {
		for _, st := range States {
			g(dState, b2f(se.State == st), se.Peer, st)
		}
		g(dUp, b2f(se.Established), se.Peer)
		g(dUptime, se.Uptime.Seconds(), se.Peer)
		g(dSent, float64(se.PrefixesSent), se.Peer)
		c(dUpdates, float64(se.UpdatesSent), se.Peer)
		g(dGR, b2f(se.GracefulRestart), se.Peer)
		if b := se.BFD; b != nil {
			for _, st := range BFDStates {
				g(dBFDState, b2f(b.State == st), se.Peer, st)
			}
			g(dBFDUp, b2f(b.State == "up"), se.Peer)
			c(dBFDFailures, float64(b.Failures), se.Peer)
			c(dBFDPackets, float64(b.Sent), se.Peer, "sent")
			c(dBFDPackets, float64(b.Received), se.Peer, "received")
			g(dBFDDetect, b.DetectTime.Seconds(), se.Peer)
		}
	}
	n := s.Counts()
	g(dAnnounced, float64(len(s.Announced())))
	c(dAnnounce, float64(n.Announcements))
	c(dWithdraw, float64(n.Withdrawals))
	c(dReplace, float64(n.Replacements))
	c(dRIBErrors, float64(n.Errors))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
