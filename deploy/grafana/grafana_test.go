package grafana

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestDashboard checks the shipped dashboard's structure (the lab's end-to-end test runs its
// expressions against a real Prometheus) and that the provisioning files name the datasource
// uid its panels use and the directory the dashboard is to be copied into.
func TestDashboard(t *testing.T) {
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Check(); err != nil {
		t.Fatal(err)
	}
	qs := d.Queries("1m")
	if len(qs) < len(Rows) {
		t.Fatalf("%d queries, want at least one per row", len(qs))
	}
	for _, q := range qs {
		if strings.Contains(q.Expr, "$") {
			t.Errorf("%s / %s: unexpanded variable in %s", q.Row, q.Panel, q.Expr)
		}
	}
	var ds struct {
		Datasources []struct{ UID, Type, URL string }
	}
	readYAML(t, "provisioning/datasources/switchyard.yaml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].UID != DatasourceUID || ds.Datasources[0].Type != "prometheus" {
		t.Errorf("datasource provisioning %+v, want one prometheus with uid %s", ds, DatasourceUID)
	}
	var dp struct {
		Providers []struct {
			Type    string
			Options struct{ Path string }
		}
	}
	readYAML(t, "provisioning/dashboards/switchyard.yaml", &dp)
	if len(dp.Providers) != 1 || dp.Providers[0].Type != "file" || dp.Providers[0].Options.Path == "" {
		t.Errorf("dashboard provisioning %+v, want one file provider with a path", dp)
	}
}

func readYAML(t *testing.T, p string, out any) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
}
