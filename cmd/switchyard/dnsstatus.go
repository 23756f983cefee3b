package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/internal/adminauth"
	"github.com/switchyard/switchyard/internal/webui"
)

// dnsStatusCmd reads a running server's zones from its metrics endpoint (the listener's only
// other endpoint is `dns reload`'s POST /reload): each zone's role and serial, for a secondary zone the primary it came from,
// its last transfer and next refresh, and the dynamic updates it took, by result.
func dnsStatusCmd() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a running server's zones: role, serial, a secondary's primary, last transfer and next refresh, dynamic updates applied and refused",
		Description: `Reads the server's /metrics (dns run --metrics ADDR:PORT).

   Example:
     switchyard dns status --metrics 127.0.0.1:9153`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "metrics", Value: "127.0.0.1:9153", Usage: "the server's metrics `ADDR:PORT` (dns run --metrics)"},
		},
		Action: func(c *cli.Context) error {
			addr := adminauth.Loopback(c.String("metrics"))
			body, err := webui.Fetch(c.Context, webui.Target{Stop: webui.StopDNS, Name: addr, URL: "http://" + addr + "/metrics"})
			if err != nil {
				return fmt.Errorf("%w; is `switchyard dns run --metrics %s` running?", err, addr)
			}
			return printDNSStatus(c.App.Writer, string(body))
		},
	}
}

// dnsZoneStatus is one zone's line of `dns status`.
type dnsZoneStatus struct {
	serial  float64
	hasSOA  bool
	results map[string]float64 // updates by result
	// role is primary or secondary; a secondary's primary, last transfer (kind and Unix time),
	// next SOA check (Unix time) and whether it expired.
	role, primary, kind string
	last, next          float64
	expired             bool
}

// printDNSStatus prints a table of the zones in the metrics text body.
func printDNSStatus(w io.Writer, body string) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("parse dns metrics: %w", err)
	}
	if fams["switchyard_dns_zone_serial"] == nil {
		return fmt.Errorf("no switchyard_dns_zone_serial in the metrics: is this a switchyard dns server of this version?")
	}
	zones := map[string]*dnsZoneStatus{}
	get := func(m *dto.Metric) *dnsZoneStatus {
		z := labelValue(m.GetLabel(), "zone")
		if zones[z] == nil {
			zones[z] = &dnsZoneStatus{results: map[string]float64{}, role: "primary"}
		}
		return zones[z]
	}
	each := func(name string, f func(m *dto.Metric, z *dnsZoneStatus)) {
		if fam := fams[name]; fam != nil {
			for _, m := range fam.GetMetric() {
				f(m, get(m))
			}
		}
	}
	each("switchyard_dns_zone_serial", func(m *dto.Metric, z *dnsZoneStatus) { z.serial, z.hasSOA = m.GetGauge().GetValue(), true })
	each("switchyard_dns_updates_total", func(m *dto.Metric, z *dnsZoneStatus) {
		z.results[labelValue(m.GetLabel(), "result")] += m.GetCounter().GetValue()
	})
	each("switchyard_dns_zone_info", func(m *dto.Metric, z *dnsZoneStatus) {
		z.role, z.primary, z.kind = labelValue(m.GetLabel(), "role"), labelValue(m.GetLabel(), "primary"), labelValue(m.GetLabel(), "kind")
	})
	each("switchyard_dns_zone_last_transfer_timestamp_seconds", func(m *dto.Metric, z *dnsZoneStatus) { z.last = m.GetGauge().GetValue() })
	each("switchyard_dns_zone_next_refresh_timestamp_seconds", func(m *dto.Metric, z *dnsZoneStatus) { z.next = m.GetGauge().GetValue() })
	each("switchyard_dns_zone_expired", func(m *dto.Metric, z *dnsZoneStatus) { z.expired = m.GetGauge().GetValue() == 1 })
	names := slices.Sorted(maps.Keys(zones))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ZONE\tROLE\tSERIAL\tPRIMARY\tLAST TRANSFER\tNEXT REFRESH\tUPDATES APPLIED\tUNCHANGED\tNOT APPLIED")
	for _, name := range names {
		fmt.Fprintln(tw, zones[name].line(name))
	}
	return tw.Flush()
}

// line is the zone's row of the table.
func (s *dnsZoneStatus) line(name string) string {
	var not []string
	var notTotal float64
	for _, r := range slices.Sorted(maps.Keys(s.results)) {
		if r != "ok" && r != "unchanged" {
			not = append(not, fmt.Sprintf("%s %.0f", r, s.results[r]))
			notTotal += s.results[r]
		}
	}
	serial, role, primary, last, next := "-", s.role, "-", "-", "-"
	if s.hasSOA && name != "-" { // "-": updates naming no zone of ours
		serial = fmt.Sprintf("%.0f", s.serial)
	}
	if name == "-" {
		role = "-"
	}
	if s.role == "secondary" {
		if s.expired {
			role = "secondary (expired: SERVFAIL)"
		}
		if s.primary != "" {
			primary = s.primary
		}
		if s.last > 0 {
			last = s.kind + " " + unixTime(s.last)
		}
		if s.next > 0 {
			next = unixTime(s.next)
		}
	}
	line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%.0f", name, role, serial, primary, last, next,
		s.results["ok"], s.results["unchanged"], notTotal)
	if len(not) > 0 {
		line += " (" + strings.Join(not, ", ") + ")"
	}
	return line
}

// unixTime formats a Unix time in seconds as UTC RFC 3339.
func unixTime(sec float64) string {
	return time.Unix(int64(sec), 0).UTC().Format(time.RFC3339)
}

// labelValue returns the value of the label called name, "" when absent.
func labelValue(ls []*dto.LabelPair, name string) string {
	for _, l := range ls {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
