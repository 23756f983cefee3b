package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/urfave/cli/v2"

	"github.com/switchyard/switchyard/internal/adminauth"
	"github.com/switchyard/switchyard/internal/webui"
)

// dnsStatusCmd reads a running server's zones from its metrics endpoint (the DNS stop has no
// other admin API): each zone's serial and the dynamic updates it took, by result.
func dnsStatusCmd() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show a running server's zones: serial and dynamic updates applied and refused",
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
	results map[string]float64 // updates by result
}

// printDNSStatus prints a table of the zones in the metrics text body.
func printDNSStatus(w io.Writer, body string) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("parse dns metrics: %w", err)
	}
	zones := map[string]*dnsZoneStatus{}
	get := func(z string) *dnsZoneStatus {
		if zones[z] == nil {
			zones[z] = &dnsZoneStatus{results: map[string]float64{}}
		}
		return zones[z]
	}
	if f := fams["switchyard_dns_zone_serial"]; f != nil {
		for _, m := range f.GetMetric() {
			get(labelValue(m.GetLabel(), "zone")).serial = m.GetGauge().GetValue()
		}
	} else {
		return fmt.Errorf("no switchyard_dns_zone_serial in the metrics: is this a switchyard dns server of this version?")
	}
	if f := fams["switchyard_dns_updates_total"]; f != nil {
		for _, m := range f.GetMetric() {
			z := labelValue(m.GetLabel(), "zone")
			get(z).results[labelValue(m.GetLabel(), "result")] += m.GetCounter().GetValue()
		}
	}
	names := slices.Sorted(maps.Keys(zones))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ZONE\tSERIAL\tUPDATES APPLIED\tUNCHANGED\tNOT APPLIED")
	for _, z := range names {
		s := zones[z]
		var not []string
		var notTotal float64
		for _, r := range slices.Sorted(maps.Keys(s.results)) {
			if r != "ok" && r != "unchanged" {
				not = append(not, fmt.Sprintf("%s %.0f", r, s.results[r]))
				notTotal += s.results[r]
			}
		}
		serial := fmt.Sprintf("%.0f", s.serial)
		if z == "-" {
			serial = "-" // updates naming no zone of ours
		}
		line := fmt.Sprintf("%s\t%s\t%.0f\t%.0f\t%.0f", z, serial, s.results["ok"], s.results["unchanged"], notTotal)
		if len(not) > 0 {
			line += " (" + strings.Join(not, ", ") + ")"
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
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
