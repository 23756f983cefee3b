package app

import (
	"fmt"
	"io"
)

// writeMetrics writes the counters as Prometheus text (/admin/metrics), so that the lab's one
// collector (internal/webui) and Prometheus read the app servers the way they read the stops.
func (s *Server) writeMetrics(w io.Writer) {
	c := s.Counters()
	c.Open-- // not the connection asking
	fmt.Fprintf(w, `# HELP switchyard_lab_app_requests_total Requests answered by the lab's app server (/health and /admin/ not counted).
# TYPE switchyard_lab_app_requests_total counter
switchyard_lab_app_requests_total{server=%[1]q} %[2]d
# HELP switchyard_lab_app_connections_total Connections accepted.
# TYPE switchyard_lab_app_connections_total counter
switchyard_lab_app_connections_total{server=%[1]q} %[3]d
# HELP switchyard_lab_app_open_connections Connections open now.
# TYPE switchyard_lab_app_open_connections gauge
switchyard_lab_app_open_connections{server=%[1]q} %[4]d
# HELP switchyard_lab_app_udp_datagrams_total UDP datagrams echoed.
# TYPE switchyard_lab_app_udp_datagrams_total counter
switchyard_lab_app_udp_datagrams_total{server=%[1]q} %[5]d
`, c.Name, c.Requests, c.Conns, max(c.Open, 0), c.UDP)
}
