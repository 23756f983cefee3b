// Package grafana holds switchyard's Grafana dashboard (dashboards/switchyard.json: one row per
// stop, the panels of the live web view) with its provisioning files (provisioning/), and reads
// the dashboard for the tests: its structure here, every PromQL expression against the lab's
// Prometheus in the lab's end-to-end test.
package grafana

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

//go:embed dashboards/switchyard.json
var dashboardJSON []byte

// DatasourceUID is the uid of the Prometheus datasource that provisioning/datasources defines
// and every panel names.
const DatasourceUID = "switchyard-prometheus"

// Rows are the dashboard's rows in order: one per stop along the request path.
var Rows = []string{"DNS", "Edge cache", "XDP balancer (L4)", "L7 proxy", "App backends"}

// Dashboard is the part of Grafana's dashboard model the checks read.
type Dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Panel is a row or a graph panel.
type Panel struct {
	ID         int                      `json:"id"`
	Type       string                   `json:"type"`
	Title      string                   `json:"title"`
	Datasource *Datasource              `json:"datasource"`
	Targets    []Target                 `json:"targets"`
	GridPos    struct{ H, W, X, Y int } `json:"gridPos"`
}

// Datasource names a datasource by type and uid.
type Datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// Target is one query of a panel.
type Target struct {
	RefID        string      `json:"refId"`
	Expr         string      `json:"expr"`
	LegendFormat string      `json:"legendFormat"`
	Datasource   *Datasource `json:"datasource"`
}

// Query is one expression with the row and panel it belongs to.
type Query struct {
	Row, Panel, Expr string
}

// Load parses the shipped dashboard.
func Load() (*Dashboard, error) {
	var d Dashboard
	if err := json.Unmarshal(dashboardJSON, &d); err != nil {
		return nil, fmt.Errorf("parse dashboards/switchyard.json: %w", err)
	}
	return &d, nil
}

// Queries are every panel's expressions, in order, with $__rate_interval replaced by rate
// (e.g. "30s") as Grafana would.
func (d *Dashboard) Queries(rate string) []Query {
	var out []Query
	row := ""
	for _, p := range d.Panels {
		if p.Type == "row" {
			row = p.Title
			continue
		}
		for _, t := range p.Targets {
			out = append(out, Query{Row: row, Panel: p.Title, Expr: strings.ReplaceAll(t.Expr, "$__rate_interval", rate)})
		}
	}
	return out
}

// Check reports what in the dashboard is not as the docs promise: the rows in order, every
// panel under a row with at least one query, every panel and query on the provisioned
// datasource, ids and refIds unique, panels inside Grafana's 24-column grid.
func (d *Dashboard) Check() error {
	var errs []error
	if d.UID == "" || d.Title == "" {
		errs = append(errs, errors.New("dashboard has no uid or title"))
	}
	var rows []string
	ids := map[int]bool{}
	perRow := map[string]int{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			errs = append(errs, fmt.Errorf("panel id %d used twice", p.ID))
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			errs = append(errs, fmt.Errorf("panel %q: gridPos x %d w %d outside the 24 columns", p.Title, p.GridPos.X, p.GridPos.W))
		}
		if p.Type == "row" {
			rows = append(rows, p.Title)
			continue
		}
		if len(rows) == 0 {
			errs = append(errs, fmt.Errorf("panel %q comes before the first row", p.Title))
			continue
		}
		perRow[rows[len(rows)-1]]++
		errs = append(errs, checkPanel(p)...)
	}
	if strings.Join(rows, "|") != strings.Join(Rows, "|") {
		errs = append(errs, fmt.Errorf("rows %q, want one per stop: %q", rows, Rows))
	}
	for _, r := range rows {
		if perRow[r] == 0 {
			errs = append(errs, fmt.Errorf("row %q has no panel", r))
		}
	}
	return errors.Join(errs...)
}

func checkPanel(p Panel) []error {
	var errs []error
	if p.Datasource == nil || p.Datasource.UID != DatasourceUID || p.Datasource.Type != "prometheus" {
		errs = append(errs, fmt.Errorf("panel %q: datasource %+v, want prometheus uid %s", p.Title, p.Datasource, DatasourceUID))
	}
	if len(p.Targets) == 0 {
		errs = append(errs, fmt.Errorf("panel %q has no query", p.Title))
	}
	refs := map[string]bool{}
	for _, t := range p.Targets {
		if t.Expr == "" || t.RefID == "" || refs[t.RefID] {
			errs = append(errs, fmt.Errorf("panel %q: query %q has an empty expression or a missing or repeated refId", p.Title, t.RefID))
		}
		refs[t.RefID] = true
		if t.Datasource == nil || t.Datasource.UID != DatasourceUID {
			errs = append(errs, fmt.Errorf("panel %q query %s: not on datasource %s", p.Title, t.RefID, DatasourceUID))
		}
		if !strings.Contains(t.Expr, "switchyard_") {
			errs = append(errs, fmt.Errorf("panel %q query %s reads no switchyard_ metric: %s", p.Title, t.RefID, t.Expr))
		}
	}
	return errs
}
